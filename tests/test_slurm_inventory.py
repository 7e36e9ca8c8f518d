"""A `transport: slurm` inventory entry: its keys read as data, every bad one a one-line error
with file:line, and the sbatch command it gives (each option one quoted word)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchestrator.core import inventory, shell
from orchestrator.errors import SpecError
from support.cli import orch_main

GOOD = """hosts:
  cluster:
    transport: slurm
    login: login1.example.org
    user: me
    port: 2222
    partition: gpu-h100
    gpus_per_node: 8
    time: "2:00:00"
    account: proj_42
    options: [--qos=high, --constraint=h100, --exclusive]
    workdir: /shared/me/orch
    tags: [big]
"""


def load(tmp_path: Path, text: str) -> inventory.Inventory:
    (tmp_path / "inventory.yaml").write_text(text)
    return inventory.load(tmp_path / "inventory.yaml")


def test_an_entry_names_its_login_node_and_allocation(tmp_path):
    host = load(tmp_path, GOOD).hosts["cluster"]
    assert host.transport == "slurm" and host.gpus == 8 and host.workdir == "/shared/me/orch"
    assert host.slurm == inventory.Allocation("login1.example.org", "gpu-h100", 8, "2:00:00", "proj_42",
                                              ("--qos=high", "--constraint=h100", "--exclusive"))
    login = host.login_host()
    assert (login.transport, login.address, login.user, login.port, login.slurm) == ("ssh", "login1.example.org", "me",
                                                                                     2222, None)
    local = load(tmp_path, GOOD.replace("login1.example.org", "local")).hosts["cluster"].login_host()
    assert (local.transport, local.address) == ("local", None)


def test_the_sbatch_command_quotes_every_value_as_one_word(tmp_path):
    alloc = load(tmp_path, GOOD.replace("--exclusive", "'--constraint=a;b|$(x)'")).hosts["cluster"].slurm
    assert alloc is not None
    words = shlex.split(shell.slurm_submit("orch.cluster", "orch pid 1", 1, alloc.partition, alloc.account,
                                           alloc.time, alloc.gpus_per_node, alloc.options))
    assert words[:2] == ["sbatch", "--parsable"]
    assert {"--job-name=orch.cluster", "--partition=gpu-h100", "--account=proj_42", "--time=2:00:00",
            "--gpus-per-node=8", "--nodes=1", "--comment=orch pid 1", "--constraint=a;b|$(x)"} <= set(words)


@pytest.mark.parametrize("change,line,message", [
    (("    login: login1.example.org\n", ""), 3, "needs `login:`"),
    (("    workdir: /shared/me/orch\n", ""), 3, "needs `workdir:` on the cluster's shared filesystem"),
    (("gpus_per_node: 8", "gpus_per_node: -1"), 8, "gpus_per_node must be a whole number"),
    (("partition: gpu-h100", "partition: 'gpu h100'"), 7, "`partition` must be a Slurm name"),
    (("time: \"2:00:00\"", "time: soon"), 9, "is not a Slurm time limit"),
    (("--qos=high", "'--qos high'"), 11, "is not one sbatch option"),
    (("--qos=high", "--job-name=mine"), 11, "orch's to set"),
    (("--qos=high", "--gres=gpu:4"), 11, "use `gpus_per_node:`"),
    (("options: [--qos=high, --constraint=h100, --exclusive]", "options: --qos=high"), 11, "must be a list"),
    (("    user: me\n", "    gpus: 8\n"), 5, "unknown key 'gpus'"),
    (("    user: me\n", "    address: x\n"), 5, "unknown key 'address'"),
])
def test_a_bad_key_is_one_line_with_file_and_line(tmp_path, change, line, message):
    with pytest.raises(SpecError) as caught:
        load(tmp_path, GOOD.replace(*change))
    text = str(caught.value)
    assert "\n" not in text and message in text, text
    assert text.startswith(f"{tmp_path / 'inventory.yaml'}:{line}:"), text


def test_orch_says_a_bad_entry_in_one_line_and_exits_2(tmp_path):
    (tmp_path / "inventory.yaml").write_text(GOOD.replace("time: \"2:00:00\"", "time: 1.5"))
    code, _out, err, crash = orch_main(tmp_path, ["hosts"])
    assert crash is None and code == 2, err
    assert err.strip().count("\n") == 0 and "is not a Slurm time limit" in err, err
