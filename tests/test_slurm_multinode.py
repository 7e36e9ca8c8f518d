"""A run over two nodes of one Slurm job, on a real two-node cluster on this machine (`tests/slurm.py`
with nodes=2: two slurmd, node1 at 127.0.0.1 and node2 at 127.0.0.2): one sbatch of 2 nodes, every
node's commands as steps on its own node, rank 0 on the job's first node and the rendezvous at its
NodeAddr, the allocation released at the end, after an interrupt too; and the gang's pure wiring
(a Slurm entry stands for all the nodes of its job).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import subprocess
import sqlite3
import time
import zlib
from pathlib import Path

import pytest

import slurm
from orchestrator.core.inventory import Allocation, Host
from orchestrator.core.spec import PatchDef, RunPlan
from orchestrator.errors import HostError, SpecError
from orchestrator.host import lifecycle
from orchestrator.host.session import HostSession
from orchestrator.remote import slurm as slurm_transport
from orchestrator.run import gang
from support.cli import orch, records, start_orch, wait_for
from support.cluster import INSERTED, cluster_fixture, slurm_project
from support.processes import marked_processes

cluster = cluster_fixture(nodes=2)


@pytest.fixture
def clean(cluster: slurm.Cluster):
    yield cluster
    cluster.cancel_all()


def entry(name: str, nodes: int = 1) -> Host:
    return Host(name=name, transport="slurm", workdir="/shared", gpus=8, slurm=Allocation("local", gpus_per_node=8,
                                                                                           nodes=nodes))


def plan(nodes: int, variant: str = "v") -> RunPlan:
    return RunPlan("e", variant, {"tp_size": 8}, {}, (), {}, 1, (), nodes=nodes)


def test_a_slurm_entry_asks_for_its_widest_plan_and_runs_it_alone_never_beside_other_hosts():
    ssh = [Host(name=f"h{i}", gpus=8) for i in range(2)]
    [sized] = gang.sized([entry("c")], [plan(1), plan(2)])
    assert sized.slurm is not None and sized.slurm.nodes == 2 and gang.places(sized) == 2
    hosts = {h.name: h for h in [*ssh, sized]}
    assert gang.group(["c", "h0", "h1"], hosts, plan(2)) == ["c"]  # the job's nodes, one member
    assert gang.group(["h0", "h1", "c"], hosts, plan(2)) == ["h0", "h1"]  # whichever comes first
    assert gang.group(["h0", "c"], hosts, plan(2)) == ["c"]  # a Slurm node never fills an SSH gang
    assert gang.group(["c"], hosts, plan(4)) == [] and gang.group(["h0"], hosts, plan(2)) == []
    gang.check_fits([plan(4)], [entry("c"), ssh[0]])  # the entry's job is sized to the plan
    with pytest.raises(SpecError, match="needs nodes=4 hosts"):
        gang.check_fits([plan(4)], [*ssh, dataclasses.replace(entry("c"), gpus=1)])  # 8 GPUs do not split over its 1


def test_an_allocation_of_two_nodes_is_one_job_with_a_step_on_each_node_and_is_released(clean, tmp_path):
    """A job a dead controller left is cancelled first, a live one's kept. One sbatch of 2 nodes;
    node 0's connection and node 1's sibling session run their steps on their own nodes
    (SLURMD_NODENAME); each node's address is its NodeAddr; a file both nodes see one copy of (the
    shared workdir) cannot be patched per node; closing releases the job."""
    host = dataclasses.replace(entry("cluster", nodes=2), workdir=str(tmp_path / "shared"),
                               slurm=Allocation("local", clean.partition, slurm.GPUS, nodes=2))
    said: list[str] = []
    dead = subprocess.Popen(["true"])
    dead.wait()
    left, other_controller = (left_job(clean, "cluster", pid) for pid in (dead.pid, os.getpid()))

    async def work() -> None:
        first = await HostSession.open(host, lambda _h, text: said.append(text))
        assert f"slurm job {left} was left by a controller that died (pid {dead.pid}): cancelling it" in said, said
        try:
            job = slurm_transport.job_of(first.conn)
            assert job is not None and job.nodes == ("node1", "node2")
            assert [job.address(n) for n in job.nodes] == ["127.0.0.1", "127.0.0.2"]
            mine = [line.split()[1:] for line in clean.jobs() if line.split()[0] not in (left, other_controller)]
            assert mine == [["RUNNING", "None", "orch.cluster"]]
            assert any(line.startswith(f"{other_controller} RUNNING") for line in clean.jobs())  # alive: kept
            [other] = await lifecycle.job_nodes(first, 2, lambda _h, text: said.append(text))
            assert other.host.name == "cluster:node2" and other.host.workdir == f"{host.workdir}/nodes/node2"
            names = [(await s.conn.run("printf %s $SLURMD_NODENAME")).out for s in (first, other)]
            assert names == ["node1", "node2"]
            shared = tmp_path / "shared" / "lib"
            shared.mkdir(parents=True)
            with pytest.raises(HostError, match=r"cluster:node2: node 1 sees node 0's copy of .*lib/x.py \(shared"):
                await lifecycle.own_files([first, other], [PatchDef("p", str(shared / "x.py"), "here")])
            assert list(shared.iterdir()) == []  # the probe removed
            await other.close()  # leaves the job to node 0's connection
            assert (await first.conn.run("true")).ok
        finally:
            await first.close()

    asyncio.run(work())
    assert "released" in said[-1], said
    clean.client("scancel", other_controller)
    wait_gone(clean)


def left_job(cluster: slurm.Cluster, entry: str, pid: int) -> str:
    """A job as a controller of this machine with `pid` leaves one for `entry` (one CPU, no GPU)."""
    done = cluster.client("sbatch", "--parsable", f"--job-name=orch.{entry}", "--output=/dev/null", "--ntasks=1",
                          f"--comment=orch controller {socket.gethostname()} pid {pid}", "--wrap=exec sleep infinity")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def wait_gone(cluster: slurm.Cluster) -> None:
    deadline = time.monotonic() + 15
    while cluster.jobs() and time.monotonic() < deadline:  # a cancelled job completes for a moment
        time.sleep(0.2)
    assert cluster.jobs() == []


def two_node_project(project: Path, cluster: slurm.Cluster, requests: int) -> Path:
    """The inventory's one host is the cluster; the demo experiment's `fixed` variant over 2 nodes."""
    return slurm_project(project, cluster, requests, nodes=2)


def assert_patched_on_both_nodes(project: Path, run: dict) -> None:
    """Every patch on each node's own stand-in (node 1's under the workdir's nodes/node2), all reverted."""
    on_node_1 = [p for p in run["patches"] if p["file"].startswith(str(project / "shared" / "nodes" / "node2") + "/")]
    assert run["patches"] and len(on_node_1) * 2 == len(run["patches"]), run["patches"]
    assert all(p["state"] == "reverted" for p in run["patches"]), run["patches"]


def assert_released_and_reverted(project: Path, cluster: slurm.Cluster, output: str) -> None:
    assert "released" in output, output
    wait_gone(cluster)
    for stand_in in (project / "shared" / "rehearsal", project / "shared" / "nodes" / "node2" / "rehearsal"):
        for name, text in INSERTED.items():
            assert text not in (stand_in / "sglang" / name).read_text(), f"{stand_in}/{name} left patched"
    assert marked_processes(project) == [], output


@pytest.mark.slow  # ~8 s
def test_a_dry_run_of_a_two_node_plan_checks_rank_0s_part_on_one_node(project, clean):
    spec = two_node_project(project, clean, requests=2)
    done = orch(project, "run", str(spec), "--variant", "fixed", "--dry-run", tests_on_path=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "nodes=2 on one Slurm job: a dry run checks rank 0's part only" in " ".join(output.split()), output
    assert f"nodes {clean.node}, partition" in output and records(project) == [], output  # one node asked for
    wait_gone(clean)


# ~25 s (every host command a step; twice the nodes): the allocation case above is the quick sibling
@pytest.mark.slow
def test_a_two_node_run_gets_one_job_of_two_nodes_and_releases_it(project, clean):
    spec = two_node_project(project, clean, requests=2)
    done = orch(project, "run", str(spec), "--variant", "fixed", tests_on_path=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    [run] = records(project)
    assert run["status"] == "succeeded" and run["host"] == "cluster", output
    events = {e["kind"]: e["message"] for e in run["events"]}
    assert events["slurm-job"].startswith("job ") and "nodes node1,node2" in events["slurm-job"], events
    assert events["nodes"].startswith("node 0 cluster, node 1 cluster:node2"), events["nodes"]
    assert "--dist-init-addr 127.0.0.1:29500" in run["command"]  # node1's NodeAddr
    assert "--node-rank 1" in events["node-script"]
    assert output.count(" released") == 1, output  # one job, one release
    with sqlite3.connect(project / "orch.db") as db:
        [(node, host, data)] = db.execute("SELECT node, host, data FROM nodelogrow WHERE run_id = ?", (run["id"],))
    assert (node, host) == (1, "cluster:node2") and "Node rank 1 of 2" in zlib.decompress(data).decode()
    assert_patched_on_both_nodes(project, run)
    assert_released_and_reverted(project, clean, output)


@pytest.mark.slow
def test_an_interrupted_two_node_run_releases_its_job_and_reverts_both_nodes(project, clean):
    spec = two_node_project(project, clean, requests=4000)
    proc = start_orch(project, "run", str(spec), "--variant", "fixed", "--no-preflight", tests_on_path=True, new_session=True)
    before = wait_for(proc, "sending")
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    output = before + rest
    assert proc.returncode == 130, output
    [run] = records(project)
    assert run["status"] == "interrupted", output
    assert_patched_on_both_nodes(project, run)
    assert_released_and_reverted(project, clean, output)


@pytest.mark.slow
def test_a_sigkilled_two_node_run_is_cleaned_up_by_the_next_command(project, clean):
    """SIGKILL releases nothing: the next command on the entry cancels the job the dead controller
    left, takes the lock and recovers node 0's folder and node 1's (`nodes/node2`): both stand-ins
    restored, the run interrupted with every node's patch rows reverted, nothing left in the queue."""
    spec = two_node_project(project, clean, requests=4000)
    proc = start_orch(project, "run", str(spec), "--variant", "fixed", "--no-preflight", tests_on_path=True, new_session=True)
    before = wait_for(proc, "sending")
    proc.kill()
    proc.communicate(timeout=30)
    assert [line.split()[1] for line in clean.jobs()] == ["RUNNING"], before  # left behind
    done = orch(project, "revert", "--host", "cluster", tests_on_path=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "was left by a controller that died" in output, output
    [run] = records(project)
    assert run["status"] == "interrupted", output
    assert_patched_on_both_nodes(project, run)
    assert_released_and_reverted(project, clean, output)
