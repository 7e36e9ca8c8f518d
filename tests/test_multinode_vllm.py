"""vLLM over several nodes (`nodes: N`, vLLM 0.33.0's `--nnodes/--node-rank/--master-addr/--master-port`,
`--headless` on every node but rank 0): the flags the vLLM template renders per node, the flag check
against the real 0.10.1.1 and 0.33.0 sources (tests/vllm_wheels.py), the rehearsal vLLM's two nodes
as real processes, and the real `orch run` over two sshd namespace hosts (root only)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sshd
from conftest import ROOT, group_alive
from orchestrator.core import render, spec as specs
from orchestrator.core.inventory import Host
from orchestrator.engines.vllm import flags, logs
from orchestrator.rehearsal import vllm as rehearsal
from orchestrator.run import execute, multinode
from support.cli import orch, read_until, record, start_orch
from support.processes import node_logs, pids, server_process
from vllm_wheels import sources

TEMPLATE = ROOT / "templates" / "vllm_launch.sh.j2"
NODE_FLAGS = "  --nnodes 2 \\\n  --node-rank {rank} \\\n  --master-addr 10.0.0.1 \\\n  --master-port 29500 \\\n"


def scripts(nodes: int = 2, **params: object) -> list[str]:
    """Each node's launch script of experiments/vllm_eagle.yaml's eagle3 variant, rank 0 at 10.0.0.1."""
    spec = specs.load(ROOT / "experiments" / "vllm_eagle.yaml")
    plan = next(p for p in specs.expand(spec) if p.variant == "eagle3")
    plan = dataclasses.replace(plan, params={**plan.params, **params})
    hosts = [Host(name=f"h{i}", address=f"10.0.0.{i + 1}", gpus=4, python="/venv/bin/python",
                  rehearsal="0.33.0") for i in range(nodes)]
    # Nodes.context reads the peers' count only: placeholders stand for the other nodes' sessions
    rendezvous = multinode.Nodes(tuple(object() for _ in hosts[1:]), "10.0.0.1", 29500)  # type: ignore[arg-type]
    out = []
    for rank, host in enumerate(hosts):
        context = execute.run_context(spec, plan, host, "u1")
        if nodes > 1:
            context.update(rendezvous.context(rank))
        out.append(render.launch_script(TEMPLATE, context))
    return out


def test_each_node_renders_its_node_flags_and_every_node_but_rank_0_is_headless():
    rank0, rank1 = scripts()
    assert NODE_FLAGS.format(rank=0) in rank0 and "--headless" not in rank0
    assert NODE_FLAGS.format(rank=1) + "  --headless \\\n" in rank1
    (alone,) = scripts(nodes=1)
    assert "--nnodes" not in alone and "--master-addr" not in alone and "--headless" not in alone


def test_a_run_over_several_nodes_serves_even_where_the_module_entry_point_is_asked_for():
    """vLLM 0.33.0's `python -m vllm.entrypoints.openai.api_server` never reads --headless
    (launchers/api_server/entry.py): every node of such a run is launched through `serve`."""
    for script in scripts(entrypoint="module"):
        assert "-m vllm.entrypoints.cli.main serve " in script and "openai.api_server" not in script
    (alone,) = scripts(nodes=1, entrypoint="module")
    assert "-m vllm.entrypoints.openai.api_server --model " in alone


def test_the_flag_check_knows_the_node_flags_of_each_release():
    rank0, rank1 = scripts()
    new = flags.scan(sources("0.33.0", flags.SOURCE_FILES), "0.33.0")
    assert flags.check(rank0, new) == [] and flags.check(rank1, new) == []
    old = flags.scan(sources("0.10.1.1", flags.SOURCE_FILES), "0.10.1.1")
    problems = flags.check(rank1, old)
    assert [p.flag for p in problems] == ["--nnodes", "--node-rank", "--master-addr", "--master-port"]  # --headless is known
    (first, *_) = flags.messages(problems, "templates/vllm_launch.sh.j2", TEMPLATE.read_text())
    assert first.startswith("templates/vllm_launch.sh.j2:")
    assert "vLLM 0.10.1.1 has no flag --nnodes: it runs no server over several nodes without Ray" in first


def launch(tree: Path, log: Path, *args: str) -> subprocess.Popen:
    env = {"PYTHONPATH": str(tree.parent), "ORCH_REHEARSAL_GPUS": "4", "PATH": "/usr/bin:/bin"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=tree.parent)


def test_the_rehearsal_vllm_over_two_nodes_joins_and_a_headless_node_fails_when_rank_0_goes(tmp_path):
    tree = rehearsal.assemble("0.33.0", tmp_path)
    shutil.copy(rehearsal.CHECKPOINT_MAKER, tmp_path / "make_checkpoints.py")
    subprocess.run([sys.executable, str(tmp_path / "make_checkpoints.py"), str(tmp_path / "ck")], check=True,
                   capture_output=True, timeout=60)
    port, master = sshd.free_port(), sshd.free_port()
    common = [str(tmp_path / "ck" / "llama-target"), "--tensor-parallel-size", "8", "--port", str(port), "--nnodes", "2",
              "--master-addr", "127.0.0.1", "--master-port", str(master)]
    head_log, node_log = tmp_path / "r0.log", tmp_path / "r1.log"
    head = launch(tree, head_log, *common, "--node-rank", "0")
    time.sleep(0.3)
    assert head.poll() is None and not logs.is_ready(head_log.read_bytes())  # waits for the other node
    node = launch(tree, node_log, *common, "--node-rank", "1", "--headless")
    deadline = time.monotonic() + 20
    while not logs.is_ready(head_log.read_bytes()):
        assert time.monotonic() < deadline and head.poll() is None, head_log.read_text()
        time.sleep(0.05)
    text = node_log.read_text()
    assert (f"[serve.py:224] Launching vLLM (v0.33.0) headless multiproc executor, with head node address "
            f"127.0.0.1:{master} for torch.distributed process group.") in text
    assert "non-default args" not in text and "Starting vLLM server" not in text  # no API server on a headless node
    assert "node rank 1 joined" in head_log.read_text()
    head.kill()
    assert node.wait(timeout=10) == 1
    found = logs.diagnose_bytes(node_log.read_bytes())
    assert found is not None and found.kind == "node-lost", node_log.read_text()
    assert "Worker proc VllmWorker-0 died unexpectedly" in node_log.read_text()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    if sshd.netns_missing() is not None:
        pytest.skip(sshd.netns_missing() or "")
    yield from sshd.fast_failing_fleet(tmp_path_factory.mktemp("vllm-nodes"), 2)


def two_vllm_nodes(project: Path, fleet: sshd.Fleet, requests: int = 2, release: str = "true") -> list[Path]:
    """Both fleet hosts (the rehearsal vLLM `release`), experiments/vllm_eagle.yaml over 2 nodes with
    a tiny workload; returns the hosts' workdirs in rank order."""
    workdirs = [project / f"{s.name}-work" for s in fleet.servers]
    known = fleet.known_hosts()
    entries = "".join(s.rehearsal_entry(known, w) for s, w in zip(fleet.servers, workdirs))
    (project / "inventory.yaml").write_text("hosts:\n" + entries.replace("rehearsal: true", f"rehearsal: {release}"))
    shutil.copy(TEMPLATE, project / "templates" / TEMPLATE.name)
    spec = (ROOT / "experiments" / "vllm_eagle.yaml").read_text()
    spec = spec.replace("hosts: [local]", "hosts: [h00, h01]\nnodes: 2").replace("requests: 16", f"requests: {requests}")
    (project / "experiments" / "vllm_eagle.yaml").write_text(spec)
    return workdirs


RUN = ("run", "experiments/vllm_eagle.yaml", "--variant", "eagle3", "--set", "port=30000")


def test_a_two_node_vllm_run_over_two_sshd_hosts_succeeds_with_a_log_per_node(project, fleet, no_user_ssh):
    """THE representative case of vLLM over several hosts (~8 s): rank 0 serves, rank 1 is headless."""
    workdirs = two_vllm_nodes(project, fleet)
    done = orch(project, *RUN)
    assert done.returncode == 0, done.stdout + done.stderr
    rec = record(project)
    assert rec["status"] == "succeeded" and rec["host"] == "h00" and rec["metrics"]["accept_len"] >= 2.0
    address = fleet.servers[0].address
    assert f"--nnodes 2 \\\n  --node-rank 0 \\\n  --master-addr {address} \\\n  --master-port 29500" in rec["command"]
    assert "--headless" not in rec["command"]
    events = {e["kind"]: e["message"] for e in rec["events"]}
    assert events["node-script"].startswith("node 1 on h01:") and "--node-rank 1 \\\n" in events["node-script"]
    assert "  --headless \\\n" in events["node-script"] and events["nodes"].startswith("node 0 h00, node 1 h01")
    assert "node rank 1 joined" in orch(project, "logs", str(rec["id"])).stdout  # rank 0's log, the run's
    ((host, log),) = node_logs(project, rec["id"]).values()
    assert host == "h01" and f"head node address {address}:29500 for torch.distributed" in log
    assert "Starting vLLM server" not in log  # a headless node runs no API server
    for workdir in workdirs:
        assert not group_alive(pids(workdir, rec["uid"]))


@pytest.mark.slow
def test_a_headless_nodes_server_killed_fails_the_run_with_its_diagnosis_and_stops_rank_0(project, fleet, no_user_ssh):
    workdirs = two_vllm_nodes(project, fleet, requests=4000)
    proc = start_orch(project, *RUN)
    seen = read_until(proc, "sending")
    uid = next(line.split("(")[1].split(")")[0] for line in seen.splitlines() if " started" in line)
    os.kill(server_process(pids(workdirs[1], uid), b"vllm.entrypoints"), signal.SIGKILL)  # rank 1's server crashes (its wrapper stays)
    rest, _ = proc.communicate(timeout=120)
    rec = record(project)
    assert proc.returncode == 1 and rec["status"] == "failed", seen + rest
    assert rec["error"].startswith("h01: node 1's server exited"), rec["error"]
    for workdir in workdirs:
        assert not group_alive(pids(workdir, uid))


@pytest.mark.slow
def test_vllm_0_10_1_1_over_two_nodes_is_refused_by_the_flag_check_in_one_line(project, fleet, no_user_ssh):
    workdirs = two_vllm_nodes(project, fleet, release='"0.10.1.1"')
    done = orch(project, *RUN)
    assert done.returncode == 2, done.stdout + done.stderr
    rec = record(project)
    assert rec["status"] == "failed" and "\n" not in rec["error"], rec["error"]
    assert "vLLM 0.10.1.1 has no flag --nnodes: it runs no server over several nodes without Ray" in rec["error"]
    assert not {"launched", "node-launched"} & {e["kind"] for e in rec["events"]}
    for workdir in workdirs:  # refused before anything was launched or patched
        assert not list(workdir.glob("runs/*/pid")) and not list((workdir / "journal").rglob("*.json"))
