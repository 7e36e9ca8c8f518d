"""The rehearsal experiment on a real one-node Slurm cluster (`tests/slurm.py`, one per module):
orch allocates the node (sbatch), runs every host command as a step beside the job (srun
--overlap), releases the allocation at the end, after an interrupt too, and says a queued job's
state and reason while it waits behind another. After each: `squeue` empty, nothing left patched.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurm
from conftest import free_port
from orchestrator.core.inventory import Allocation, Host
from orchestrator.errors import HostError
from orchestrator.remote import connect
from orchestrator.remote import slurm as slurm_transport
from support.cli import orch, records, start_orch, wait_for
from support.cluster import INSERTED, cluster_fixture, slurm_project
from support.processes import marked_processes

cluster = cluster_fixture()


@pytest.fixture
def clean(cluster: slurm.Cluster) -> Iterator[slurm.Cluster]:
    """Each case starts with an empty queue and leaves none of its jobs behind."""
    yield cluster
    cluster.cancel_all()


def assert_released_and_reverted(project: Path, cluster: slurm.Cluster, output: str) -> None:
    assert "released" in output, output
    deadline = time.monotonic() + 15
    while cluster.jobs() and time.monotonic() < deadline:  # a cancelled job completes for a moment
        time.sleep(0.2)
    assert cluster.jobs() == [], output
    for name, text in INSERTED.items():
        assert text not in (project / "shared" / "rehearsal" / "sglang" / name).read_text(), f"{name} left patched"
    assert marked_processes(project) == [], output


def assert_ran_in_its_job(project: Path, cluster: slurm.Cluster, output: str) -> None:
    [run] = records(project)
    assert run["status"] == "succeeded" and run["host"] == "cluster", output
    [job] = [e["message"] for e in run["events"] if e["kind"] == "slurm-job"]
    assert job.startswith("job ") and f"nodes {cluster.node}, partition {cluster.partition}" in job, job
    assert f"slurm {job}: running" in " ".join(output.split()), output


# the queued case is the one `make test` runs (it is the plain run's case too, after the wait)
@pytest.mark.slow
def test_the_rehearsal_experiment_runs_in_an_allocation_that_is_released(project, clean):
    spec = slurm_project(project, clean, requests=4)
    done = orch(project, "run", str(spec), "--variant", "fixed", tests_on_path=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert_ran_in_its_job(project, clean, output)
    assert_released_and_reverted(project, clean, output)


def test_an_interrupted_run_releases_the_allocation_and_reverts(project, clean):
    spec = slurm_project(project, clean, requests=400)
    proc = start_orch(project, "run", str(spec), "--variant", "fixed", "--no-preflight", tests_on_path=True, new_session=True)
    before = wait_for(proc, "sending")
    # the launch's step lasts while the server it started lives (the batch step aside): seen running
    # past its first second (squeue counts whole seconds, and the rehearsal server is ready in less)
    deadline = time.monotonic() + 5
    while True:
        steps = [line.split() for line in clean.client("squeue", "-s", "-h", "-o", "%i %M").stdout.splitlines()]
        if any(not step.endswith(".batch") and used != "0:00" for step, used in steps) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert any(not step.endswith(".batch") and used != "0:00" for step, used in steps), steps
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    output = before + rest
    assert proc.returncode == 130, output
    assert [r["status"] for r in records(project)] == ["interrupted"], output
    assert_released_and_reverted(project, clean, output)


def test_a_run_waits_in_the_queue_behind_another_job_then_runs_and_releases(project, clean):
    blocker = clean.block()  # holds the node's 8 GPUs
    spec = slurm_project(project, clean, requests=4)
    proc = start_orch(project, "run", str(spec), "--variant", "fixed", tests_on_path=True, new_session=True)
    before = wait_for(proc, "(Resources): waiting in the queue", 30)
    assert "pending" in before, before
    assert proc.poll() is None
    clean.client("scancel", blocker)
    rest, _ = proc.communicate(timeout=90)
    output = before + rest
    assert proc.returncode == 0, output
    assert_ran_in_its_job(project, clean, output)
    assert_released_and_reverted(project, clean, output)


def test_a_node_connection_runs_reads_and_writes_through_steps_and_says_when_the_job_is_gone(clean, tmp_path):
    """The Connection protocol on the node, off the shared workdir (through steps): status and
    both streams, stdin, an atomic write with its mode, read, stat, a missing file, a tree, a port
    through the relay; once the job is cancelled under it, a command is one clear HostError;
    closing still releases the job and stops the relay."""
    host = Host(name="cluster", transport="slurm", workdir=str(tmp_path / "shared"),
                slurm=Allocation("local", clean.partition, slurm.GPUS))
    node_local = tmp_path / "node-local"
    said: list[str] = []
    relay = 0

    async def work() -> None:
        nonlocal relay
        conn = await connect(host, say=lambda _host, text: said.append(text))
        try:
            done = await conn.run("echo out; echo err >&2; exit 3")
            assert (done.exit_status, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
            assert (await conn.run("wc -c", input=b"x" * 70000)).out.strip() == "70000"
            target = str(node_local / "f.txt")
            await conn.write_file(target, b"data", 0o640)
            assert await conn.read_file(target) == b"data"
            found = await conn.stat(target)
            assert found is not None and (found.size, found.mode) == (4, 0o640)
            assert await conn.stat(target + ".none") is None
            with pytest.raises(FileNotFoundError):
                await conn.read_file(target + ".none")
            await conn.put_tree(Path(slurm.__file__).parent / "fixtures" / "tool", str(node_local / "tree"))
            assert sorted(p.name for p in (node_local / "tree").iterdir())
            relay = await reached_through_a_relay(conn, tmp_path)
            job = slurm_transport.job_of(conn)
            assert job is not None and job.nodes == (clean.node,)
            clean.client("scancel", job.id)
            deadline = time.monotonic() + 15
            while any(line.startswith(f"{job.id} RUNNING") for line in clean.jobs()) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            with pytest.raises(HostError, match=rf"srun on node {clean.node} of slurm job {job.id} failed"):
                await conn.run("true")
        finally:
            await conn.close()

    asyncio.run(work())
    assert not Path(f"/proc/{relay}").exists() or Path(f"/proc/{relay}/stat").read_text().split()[2] == "Z"
    assert any("running" in text for text in said) and ("released" in said[-1] or "could not release" in said[-1]), said


@pytest.mark.slow
def test_ctrl_c_while_the_job_waits_in_the_queue_cancels_it(project, clean):
    blocker = clean.block()
    spec = slurm_project(project, clean, requests=4)
    proc = start_orch(project, "run", str(spec), "--variant", "fixed", tests_on_path=True, new_session=True)
    before = wait_for(proc, "waiting in the queue", 30)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, before + rest
    assert "released" in rest, before + rest
    deadline = time.monotonic() + 15
    while [j for j in clean.jobs() if not j.startswith(blocker)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [j.split()[0] for j in clean.jobs()] == [blocker], before + rest



async def reached_through_a_relay(conn, folder: Path) -> int:
    """The forward where the node is not this machine: a relay on the login node carries each
    connection through its own srun step to the node's loopback (two requests, two steps). The
    relay's pid."""
    import urllib.request

    (folder / "served").mkdir()
    (folder / "served" / "page.txt").write_text("from the node\n" * 1000)
    port = free_port()
    pid = (await conn.run(f"cd {folder / 'served'} && setsid nohup {sys.executable} -m http.server {port} "
                          "--bind 127.0.0.1 > /dev/null 2>&1 < /dev/null & echo $!")).out.strip()
    try:
        address, local = await conn.relayed(port)
        url = f"http://{address}:{local}/page.txt"
        bodies: list[bytes] = []
        for _ in range(50):  # the server binds its port in a moment
            try:
                bodies = [await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
                          for _ in range(2)]
                break
            except OSError:
                await asyncio.sleep(0.1)
        assert bodies == [b"from the node\n" * 1000] * 2
    finally:
        await conn.run(f"kill {int(pid)}")
    return next(iter(conn._relays.values()))[0]
