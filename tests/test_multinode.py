"""Runs over several hosts (`nodes: 2`): the real `orch run` over two sshd hosts in network
namespaces (root only), the rehearsal SGLang launched on both as one server (rank 0 listens on its
rendezvous port on its namespace address, rank 1 connects to it over the bridge), a real SQLite file.
The hosts' files are this machine's (namespaces split the network only): the tests read them directly."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import sshd
from conftest import ROOT, group_alive
from support.cli import orch, read_until, record, start_orch
from support.files import untouched
from support.processes import node_logs, pids, server_process

pytestmark = pytest.mark.skipif(sshd.netns_missing() is not None, reason=sshd.netns_missing() or "")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    yield from sshd.fast_failing_fleet(tmp_path_factory.mktemp("nodes"), 2)


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


def two_nodes(project: Path, fleet: sshd.Fleet, requests: int = 2) -> list[Path]:
    """The inventory with both fleet hosts, the demo experiment over 2 nodes (`story` only, a tiny
    workload); returns the hosts' workdirs in rank order."""
    workdirs = [project / f"{s.name}-work" for s in fleet.servers]
    known = fleet.known_hosts()
    (project / "inventory.yaml").write_text(
        "hosts:\n" + "".join(s.rehearsal_entry(known, w) for s, w in zip(fleet.servers, workdirs)))
    spec = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    spec = spec.replace("requests: 16", f"requests: {requests}").replace("hosts: [local]", "hosts: [h00, h01]")
    spec = spec.replace("ready_timeout: 120", "ready_timeout: 120\nnodes: 2")
    assert "nodes: 2" in spec
    (project / "experiments" / "eagle_debug.yaml").write_text(spec)
    return workdirs


def started_sending(project: Path) -> tuple[subprocess.Popen, str, str]:
    """`orch run` of the story in the background, once its workload is sending: the process, its
    output so far and the run's uid."""
    proc = start_orch(project, "run", "experiments/eagle_debug.yaml", "--variant", "story", "--set", "port=30000")
    seen = read_until(proc, "sending")
    uid = next(line.split("(")[1].split(")")[0] for line in seen.splitlines() if " started" in line)
    return proc, seen, uid


def test_a_two_node_run_succeeds_with_a_log_per_node_and_both_hosts_pristine(project, fleet):
    workdirs = two_nodes(project, fleet)
    done = orch(project, "run", "experiments/eagle_debug.yaml", "--variant", "story", "--set", "port=30000")
    assert done.returncode == 0, done.stdout + done.stderr
    rec = record(project)
    assert rec["status"] == "succeeded" and rec["host"] == "h00" and rec["metrics"]["accept_len"] < 1.2
    address = fleet.servers[0].address
    assert f"--nnodes 2 \\\n  --node-rank 0 \\\n  --dist-init-addr {address}:29500" in rec["command"]
    events = {e["kind"]: e["message"] for e in rec["events"]}
    assert "--node-rank 1" in events["node-script"] and f"{address}:29500" in events["node-script"]
    assert events["nodes"].startswith("node 0 h00, node 1 h01")
    assert "node-launched" in events and "gone" in events["node-stopped"]
    assert "All 2 nodes joined" in orch(project, "logs", str(rec["id"])).stdout  # rank 0's log, the run's
    ((host, log),) = node_logs(project, rec["id"]).values()
    assert host == "h01" and "Node rank 1 of 2" in log and "Uvicorn running" not in log  # rank 1 serves no HTTP
    assert orch(project, "logs", str(rec["id"]), "--node", "1").stdout == log  # what `orch logs --node` prints
    missing = orch(project, "logs", str(rec["id"]), "--node", "2")
    assert missing.returncode == 2 and f"run {rec['id']} has no log of node 2; its nodes: 0, 1" in missing.stderr
    # patched and reverted on both nodes, each its own journal; both servers gone
    assert len(rec["patches"]) == 4 and all(p["state"] == "reverted" for p in rec["patches"])
    for workdir in workdirs:
        assert untouched(workdir) and not list((workdir / "journal").rglob("*.json"))
        assert not group_alive(pids(workdir, rec["uid"]))


@pytest.mark.slow
def test_one_nodes_server_killed_fails_the_run_with_its_diagnosis_and_stops_the_other(project, fleet):
    workdirs = two_nodes(project, fleet, requests=4000)
    proc, seen, uid = started_sending(project)
    os.kill(server_process(pids(workdirs[1], uid)), signal.SIGKILL)  # rank 1's server crashes (its wrapper stays)
    rest, _ = proc.communicate(timeout=120)
    rec = record(project)
    assert proc.returncode == 1 and rec["status"] == "failed", seen + rest
    assert rec["error"].startswith("h01: node 1's server exited"), rec["error"]
    assert rec["diagnosis"]["kind"] == "node-exited" and "node 1 (h01)" in rec["diagnosis"]["summary"]
    for workdir in workdirs:
        assert untouched(workdir) and not group_alive(pids(workdir, uid))


@pytest.mark.slow
def test_one_nodes_link_cut_stops_the_other_and_a_later_revert_restores_it(project, fleet):
    workdirs = two_nodes(project, fleet, requests=4000)
    proc, seen, uid = started_sending(project)
    fleet.cut(1)
    try:
        rest, _ = proc.communicate(timeout=180)
        rec = record(project)
        assert proc.returncode != 0 and rec["status"] == "failed", seen + rest
        assert "h01: node 1 of the run lost" in rec["error"], rec["error"]
        assert untouched(workdirs[0]) and not group_alive(pids(workdirs[0], uid))  # rank 0 stopped and reverted
        assert not untouched(workdirs[1])  # unreachable: left patched, its journal says so
    finally:
        fleet.restore(1)
    time.sleep(0.5)
    reverted = orch(project, "revert", "--host", "h01")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert untouched(workdirs[1]) and not group_alive(pids(workdirs[1], uid))
    after = record(project)
    assert after["status"] == "failed" and len(after["patches"]) == 4
    assert all(p["state"] == "reverted" for p in after["patches"])  # node 1's rows set by the revert on h01


@pytest.mark.slow
def test_an_interrupt_stops_and_reverts_every_node(project, fleet):
    workdirs = two_nodes(project, fleet, requests=4000)
    proc, seen, uid = started_sending(project)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    rec = record(project)
    assert proc.returncode == 130 and rec["status"] == "interrupted", seen + rest
    assert all(p["state"] == "reverted" for p in rec["patches"]) and len(rec["patches"]) == 4
    for workdir in workdirs:
        assert untouched(workdir) and not group_alive(pids(workdir, uid))


@pytest.mark.slow
def test_nodes_with_different_engine_versions_are_refused_before_anything_is_patched(project, fleet):
    workdirs = two_nodes(project, fleet)
    inventory = project / "inventory.yaml"
    text = inventory.read_text()
    at = text.index("  h01:")
    inventory.write_text(text[:at] + text[at:].replace("rehearsal: true", 'rehearsal: "0.5.23"'))
    done = orch(project, "run", "experiments/eagle_debug.yaml", "--variant", "story", "--set", "port=30000")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the nodes of one run need the same sglang: h00 has 0.5.9, h01 has 0.5.23" in done.stdout
    for workdir in workdirs:
        assert not (workdir / "runs").exists() and not list((workdir / "journal").rglob("*.json"))


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.9", "0.5.23"])
def test_the_node_flags_the_template_renders_are_each_releases(version):
    """--nnodes, --node-rank and --dist-init-addr as the real release's source spells them (its
    wheel's server_args.py, or 0.5.23's arg_groups fields): rank 1's script has no flag problem a
    single-node script has not."""
    import fnmatch
    import zipfile

    from support.scripts import script
    from wheels import wheel
    from orchestrator.engines.sglang import flags

    with zipfile.ZipFile(wheel(version)) as whl:
        sources = {name[len("sglang/"):]: whl.read(name).decode() for name in whl.namelist()
                   if any(fnmatch.fnmatch(name, f"sglang/{pattern}") for pattern in flags.SOURCE_FILES)}
    found = flags.scan(sources, version)
    assert found.version == version and len(found.options) > 150
    rank1 = script(disable_cuda_graph=False, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:29500")
    assert "--nnodes 2 \\\n  --node-rank 1 \\\n  --dist-init-addr 10.0.0.1:29500 \\\n" in rank1
    assert flags.check(rank1, found) == flags.check(script(disable_cuda_graph=False), found)
