"""Asking Slurm for a `transport: slurm` entry's nodes, and giving them back (`remote/slurm.py`
connects to them).

Why `sbatch --parsable` and not `salloc --no-shell`: sbatch answers with the job id at once,
before the job leaves the queue, so a queued job can be watched (`squeue`) and cancelled by id
from the first second, with nothing of orch's left running on the login node while it waits (a
blocking salloc would be a process there to babysit, its id read from its messages). The job's
own command (`sleep infinity`) only holds the allocation; orch's commands are steps beside it.
One job holds every node of a run over several nodes (`run/gang.py` says why). The job carries
an orch mark in its name (`orch.<host>`) and its controller in its comment, so what a dead
controller left is found (`squeue --me --name`) and cancelled before the next allocation.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostError, OrchError
from .base import Connection
from .group import uncancelled

Say = Callable[[str, str], None]  # (label, message), as the lifecycle's
POLL_FIRST_SECONDS = 0.25  # squeue while the job waits (one command on the login node each), every
POLL_MAX_SECONDS = 5.0  # 1.5 times longer than the last, up to this
CONTROLLER_MARK = "orch controller"  # the job's comment: `orch controller HOST pid PID`
GONE_STATES = {"CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
               "OUT_OF_MEMORY"}


@dataclass(frozen=True)
class Job:
    """A granted allocation: its id, nodes (in Slurm's order: the first is rank 0 of a later
    multi-node run) and partition."""

    id: str
    nodes: tuple[str, ...]
    partition: str | None
    addresses: tuple[str, ...] = ()  # each node's address as Slurm (and the other nodes) reach it

    def describe(self) -> str:
        return f"job {self.id}, nodes {','.join(self.nodes)}, partition {self.partition or 'default'}"

    def address(self, node: str) -> str:
        """Where the job's other nodes reach `node` (its NodeAddr; its name where Slurm gave none)."""
        return dict(zip(self.nodes, self.addresses)).get(node) or node


def job_name(host: Host) -> str:
    return f"orch.{host.name}"


async def allocate(login: Connection, host: Host, say: Say, nodes: int = 1) -> Job:
    """Ask for `nodes` nodes and wait until they are granted; a cancel (Ctrl-C) while waiting
    cancels the job. A job Slurm refuses or ends before it runs is a HostError."""
    assert host.slurm is not None
    alloc = host.slurm
    await _cancel_left_behind(login, host, say)
    comment = f"{CONTROLLER_MARK} {socket.gethostname()} pid {os.getpid()}"
    done = await login.run(shell.slurm_submit(job_name(host), comment, nodes, alloc.partition, alloc.account,
                                              alloc.time, alloc.gpus_per_node, alloc.options), timeout=60)
    job = done.out.strip().split(";")[0]
    if done.exit_status == 127:
        raise HostError(f"{host.name}: sbatch not found on the login node ({login.host.name}); is Slurm's "
                        "client installed there (`login:` in the inventory)?")
    if not done.ok or not job.isdigit():
        raise HostError(f"{host.name}: Slurm refused the allocation: {one_line(done.err or done.out)}; check the "
                        "entry's partition, account, time, gpus_per_node and options in the inventory")
    try:
        return await _granted(login, host, job, say)
    except BaseException:
        await uncancelled(release_quietly(login, host, job, say))
        raise


async def _cancel_left_behind(login: Connection, host: Host, say: Say) -> None:
    """The entry's jobs that an orch controller of this machine left when it died (a SIGKILL
    releases nothing): cancelled before asking for nodes again, so they hold none until their time
    limit (and the next lock holder's recovery finds their servers gone). A controller still alive
    (another orch on this entry) keeps its job."""
    done = await login.run(shell.slurm_own_jobs(job_name(host)), timeout=60, idempotent=True)
    for line in done.out.splitlines():
        job, _, comment = line.partition(" ")
        words = comment.split()
        if (job.isdigit() and len(words) == 5 and " ".join(words[:2]) == CONTROLLER_MARK
                and words[2] == socket.gethostname() and words[4].isdigit() and not _alive(int(words[4]))):
            say(host.name, f"slurm job {job} was left by a controller that died (pid {words[4]}): cancelling it")
            await release_quietly(login, host, job, say)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


async def _granted(login: Connection, host: Host, job: str, say: Say) -> Job:
    said, pause = "", POLL_FIRST_SECONDS
    while True:
        done = await login.run(shell.slurm_job_state(job), timeout=60, idempotent=True)
        state, reason, nodelist = (done.out.split() + ["", "", ""])[:3]
        if state == "RUNNING":
            names = await login.run(shell.slurm_hostnames(nodelist), timeout=60, idempotent=True)
            nodes = tuple(names.out.split())
            if not names.ok or not nodes:
                raise HostError(f"{host.name}: cannot read the nodes of slurm job {job} ({nodelist!r}): "
                                f"{one_line(names.err)}")
            addrs = await login.run(shell.slurm_node_addrs(nodelist), timeout=60, idempotent=True)
            known = dict(line.split()[:2] for line in addrs.out.splitlines() if len(line.split()) >= 2)
            granted = Job(job, nodes, host.slurm.partition if host.slurm else None,
                          tuple(known.get(node, node) for node in nodes))
            say(host.name, f"slurm {granted.describe()}: running")
            return granted
        if not state or state in GONE_STATES:
            raise HostError(f"{host.name}: slurm job {job} ended before it ran ({state or 'gone'} {reason}); "
                            f"see `scontrol show job {job}` or the cluster's logs")
        if f"{state} {reason}" != said:
            said = f"{state} {reason}"
            why = f" ({reason})" if reason and reason != "None" else ""  # None: not yet looked at by the scheduler
            say(host.name, f"slurm job {job} {state.lower()}{why}: waiting in the queue")
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, POLL_MAX_SECONDS)


async def release_quietly(login: Connection, host: Host, job: str, say: Say) -> None:
    """scancel the job; a failure is said (with the command that finishes it), not raised: the
    release runs in cleanups, which must go on."""
    try:
        done = await login.run(shell.slurm_cancel(job), timeout=60, idempotent=True)
        problem = "" if done.ok else one_line(done.err)
    except (OrchError, OSError) as exc:
        problem = str(exc)
    if problem:
        say(host.name, f"warning: could not release slurm job {job} ({problem}); `scancel {job}` on the login "
                       "node releases it")
    else:
        say(host.name, f"slurm job {job} released")


def one_line(text: str) -> str:
    return " ".join(text.split())[:300] or "no message"
