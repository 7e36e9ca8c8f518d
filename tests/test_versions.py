"""The rehearsal release a host names in the inventory, and one real `orch run` per release: accept
length from every source the release has, the server-info endpoint it answers on, its log lines
and the `sglang serve` entrypoint where the release has one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import free_port
from orchestrator.core import inventory
from orchestrator.errors import SpecError
from support.cli import orch, orch_env
from support.specs import rehearsal_experiment

# release -> (server-info endpoint, decode lines carry "accept rate", entrypoint, server_args form)
RELEASES = {
    "0.4.10": ("/get_server_info", False, "module", "server_args=ServerArgs("),
    "0.5.9": ("/server_info", True, "serve", "server_args=ServerArgs("),
    "0.5.23": ("/server_info", True, "serve", "server_args={'model_path': "),
}
SPEC = rehearsal_experiment(
    "releases", hosts=None, params={"disable_cuda_graph": True, "extra_args": ["--decode-log-interval", "10"]},
    workload={"requests": 4, "max_new_tokens": 64, "concurrency": 2}, extra="ready_timeout: 60\n")


@pytest.mark.slow  # three whole runs, one per release; the inventory cases below stay in `make test`
def test_demo_target_on_each_release(project: Path):
    hosts = "".join(
        f"  r{release.replace('.', '')}:\n    transport: local\n    workdir: {project / release}\n"
        f"    gpus: 8\n    rehearsal: \"{release}\"\n"
        for release in RELEASES)
    (project / "inventory.yaml").write_text("hosts:\n" + hosts)
    spec = project / "experiments" / "releases.yaml"
    spec.write_text(SPEC)
    env = {**orch_env(project, columns=None), "ORCH_CACHE": str(project / "cache")}

    def command(*args):
        return orch(project, *args, env=env)

    for release, (_, _, entrypoint, _) in RELEASES.items():
        done = command("run", str(spec), "--hosts", f"r{release.replace('.', '')}", "--set", f"port={free_port()}",
                       "--set", f"entrypoint={entrypoint}")
        assert done.returncode == 0, done.stdout + done.stderr
    for run, (release, (endpoint, has_rate, entrypoint, server_args)) in zip(json.loads(command("ls", "--json").stdout), RELEASES.items()):
        record = json.loads(command("show", str(run["id"]), "--json").stdout)
        sources = {s["source"]: s["value"] for s in record["metric_sources"]["accept_len"]}
        assert set(sources) == {"meta_info", f"server_info:{endpoint}", "decode_log"}, (release, sources)
        assert all(value is not None and value > 2.0 for value in sources.values()), (release, sources)
        assert record["metrics"]["accept_len"] == sources["meta_info"]
        assert (record["metrics"]["accept_rate"] is not None) == has_rate, release
        decode = [s for s in record["series"] if s["kind"] == "decode"]
        assert decode and all(s["accept_len"] > 1.0 for s in decode)
        log = command("logs", str(run["id"])).stdout
        old = release == "0.4.10"
        assert ("Decode batch. #running-req" in log) == old and ("Decode batch, #running-req" in log) == (not old)
        assert ('"GET /get_model_info HTTP/1.1" 200' in log) == old  # the warm-up's request
        assert ("'--disable-cuda-graph' is deprecated" in log) == (release == "0.5.23")  # from 0.5.14 on
        assert server_args in log
        assert ("sglang.cli.main serve" in record["command"]) == (entrypoint == "serve")


def test_inventory_names_the_rehearsal_release(tmp_path: Path):
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts:\n  a: {transport: local, rehearsal: true}\n  b: {transport: local, rehearsal: \"0.5.23\"}\n"
                    "  c: {transport: local, rehearsal: 0.4.10}\n  d: {transport: local}\n  e: {transport: local, rehearsal: false}\n")
    hosts = inventory.load(path).hosts
    assert [hosts[n].rehearsal for n in "abcde"] == ["0.5.9", "0.5.23", "0.4.10", None, None]
    assert hosts["b"].rehearsal_dir == "~/.orch/rehearsal" and hosts["d"].rehearsal_dir is None


def test_inventory_refuses_a_release_it_cannot_emulate(tmp_path: Path):
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts:\n  local:\n    transport: local\n    rehearsal: \"0.5.3\"\n")
    with pytest.raises(SpecError) as caught:
        inventory.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: host 'local' rehearsal must be true, false or an emulated engine release: ")
    assert "0.4.10, 0.5.9, 0.5.23, 0.10.1.1, 0.33.0 (true means 0.5.9)" in message and "\n" not in message
    assert caught.value.exit_code == 2
