"""A `transport: slurm` host: a node of a Slurm allocation, reached through the cluster's login node.

Opening one asks Slurm for the nodes (`allocate`), waits while the job is queued (its state and
reason said as they change), learns the nodes from the job, and hands out a `NodeConnection` per
node; closing it releases the allocation (`scancel`), whatever happened. The host lifecycle
(`host/lifecycle.py`) opens and closes it, so a run's success, failure or interrupt all end there.

Why `sbatch --parsable` and not `salloc --no-shell`: sbatch answers with the job id at once,
before the job leaves the queue, so a queued job can be watched (`squeue`) and cancelled by id
from the first second, with nothing of orch's left running on the login node while it waits (a
blocking salloc would be a process there to babysit, its id read from its messages). The job's
own command (`sleep infinity`) only holds the allocation; orch's commands are steps beside it.

Each command of the host lifecycle runs on its node as a step of the job (`srun --jobid
--nodelist --overlap`, `core/shell.py` `slurm_step`: a step lives while what it started lives, so
a detached server outlives its launch command). Files under the host's workdir, which must be on
the cluster's shared filesystem, are read and written through the login node's own connection
(no step per file); other paths (an engine installed on the node's own disk) through steps. The
job carries an orch mark in its name (`orch.<host>`) so leftovers are found: `squeue --name`.
"""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import secrets
import socket
import tarfile
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostError, OrchError
from .base import Completed, Connection, FileStat, Reconnection
from .group import uncancelled

Say = Callable[[str, str], None]  # (label, message), as the lifecycle's
POLL_FIRST_SECONDS = 0.25  # squeue while the job waits (one command on the login node each), every
POLL_MAX_SECONDS = 5.0  # 1.5 times longer than the last, up to this
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


def job_of(conn: Connection) -> Job | None:
    """The allocation a connection's node belongs to; None for any other host."""
    return conn.job if isinstance(conn, NodeConnection) else None


def job_name(host: Host) -> str:
    return f"orch.{host.name}"


async def allocate(login: Connection, host: Host, say: Say, nodes: int = 1) -> Job:
    """Ask for `nodes` nodes and wait until they are granted; a cancel (Ctrl-C) while waiting
    cancels the job. A job Slurm refuses or ends before it runs is a HostError."""
    assert host.slurm is not None
    alloc = host.slurm
    comment = f"orch controller {socket.gethostname()} pid {os.getpid()}"
    done = await login.run(shell.slurm_submit(job_name(host), comment, nodes, alloc.partition, alloc.account,
                                              alloc.time, alloc.gpus_per_node, alloc.options), timeout=60)
    job = done.out.strip().split(";")[0]
    if done.exit_status == 127:
        raise HostError(f"{host.name}: sbatch not found on the login node ({login.host.name}); is Slurm's "
                        "client installed there (`login:` in the inventory)?")
    if not done.ok or not job.isdigit():
        raise HostError(f"{host.name}: Slurm refused the allocation: {_one_line(done.err or done.out)}; check the "
                        "entry's partition, account, time, gpus_per_node and options in the inventory")
    try:
        return await _granted(login, host, job, say)
    except BaseException:
        await uncancelled(release_quietly(login, host, job, say))
        raise


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
                                f"{_one_line(names.err)}")
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
        problem = "" if done.ok else _one_line(done.err)
    except (OrchError, OSError) as exc:
        problem = str(exc)
    if problem:
        say(host.name, f"warning: could not release slurm job {job} ({problem}); `scancel {job}` on the login "
                       "node releases it")
    else:
        say(host.name, f"slurm job {job} released")


class NodeConnection:
    """The `Connection` protocol on one node of a job, through the login node's connection. The
    first node's (`open`) owns the allocation and the login connection; the other nodes' (`sibling`)
    borrow them."""

    def __init__(self, host: Host, login: Connection, job: Job, node: str, home: str,
                 release: Callable[[], Coroutine[Any, Any, None]] | None = None, owns_login: bool = True):
        self.host = host
        self.login = login
        self.job = job
        self.node = node
        self.home = home
        self._release = release  # the allocation's release, for the connection that owns it
        self._owns_login = owns_login
        self._relays: dict[int, tuple[int, int]] = {}  # node port -> (relay pid, its port) on the login node

    @classmethod
    async def open(cls, host: Host, say: Say, opener: Callable[[Host], Coroutine[Any, Any, Connection]]) -> "NodeConnection":
        """Allocate the entry's nodes (one job) through the login node (`opener` connects to it) and
        connect to the first."""
        login = await opener(host.login_host())
        try:
            job = await allocate(login, host, say, host.slurm.nodes if host.slurm else 1)
        except BaseException:
            await uncancelled(login.close())
            raise

        async def release_job() -> None:
            await release_quietly(login, host, job.id, say)

        conn = cls(host, login, job, job.nodes[0], "/", release_job)
        try:
            done = await conn.run('printf %s "$HOME"', timeout=60, idempotent=True)
            if not done.ok or not done.out.startswith("/"):
                raise HostError(f"{host.name}: a first step on node {conn.node} of slurm job {job.id} failed: "
                                f"{_one_line(done.err or done.out)}")
        except BaseException:
            await uncancelled(conn.close())
            raise
        conn.home = done.out
        return conn

    def sibling(self, rank: int, host: Host) -> "NodeConnection":
        """Node `rank` of the same job (its steps through the same login connection), as `host`;
        closing it leaves the allocation and the login connection to this one."""
        return NodeConnection(host, self.login, self.job, self.job.nodes[rank], self.home, owns_login=False)

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        return self.login.reconnections

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        gpus = self.host.slurm.gpus_per_node if self.host.slurm else 0
        step = shell.slurm_step(self.job.id, self.node, gpus, self.home, command, secrets.token_hex(8),
                                input is not None)
        done = await self.login.run(step, timeout=timeout, input=input, idempotent=idempotent)
        if done.stderr.startswith(shell.STEP_MARK.encode() + b"\n"):
            raise HostError(f"{self.host.name}: srun on node {self.node} of slurm job {self.job.id} failed: "
                            f"{_one_line(done.err[len(shell.STEP_MARK):])}; is the job still running (`squeue -j "
                            f"{self.job.id}`)?")
        return Completed(command, done.exit_status, done.stdout, done.stderr)

    def _shared(self, path: str) -> bool:
        """On the shared filesystem the login node sees too: under the host's workdir."""
        workdir = self.host.workdir.rstrip("/")
        return posixpath.normpath(path) == workdir or posixpath.normpath(path).startswith(workdir + "/")

    async def read_file(self, path: str) -> bytes:
        if self._shared(path):
            return await self.login.read_file(path)
        done = await self.run(shell.read_file(path), idempotent=True)
        if done.exit_status == shell.NO_FILE:
            raise FileNotFoundError(path)
        if not done.ok:
            raise HostError(f"{self.host.name}: cannot read {path} on {self.node}: {_one_line(done.err)}")
        return done.stdout

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        if self._shared(path):
            return await self.login.write_file(path, data, mode)
        done = await self.run(shell.write_stdin(path, mode), input=data, idempotent=True)
        if not done.ok:
            raise HostError(f"{self.host.name}: cannot write {path} on {self.node}: {_one_line(done.err)}")

    async def stat(self, path: str) -> FileStat | None:
        if self._shared(path):
            return await self.login.stat(path)
        done = await self.run(shell.stat_line(path), idempotent=True)
        fields = done.out.split()
        if not done.ok or len(fields) != 5:
            return None
        size, mtime, mode, uid, gid = fields
        return FileStat(int(size), float(mtime), int(mode, 8), int(uid), int(gid))

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        if self._shared(remote_dir):
            return await self.login.put_tree(local_dir, remote_dir)
        done = await self.run(shell.untar_stdin(remote_dir), input=_tar(local_dir), idempotent=True)
        if not done.ok:
            raise HostError(f"{self.host.name}: cannot copy {local_dir} to {remote_dir} on {self.node}: "
                            f"{_one_line(done.err)}")

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        if self._shared(path):
            return await self.login.put_file(local, path, offset, advance)
        data = await asyncio.to_thread(local.read_bytes)  # off the shared filesystem: one step, the whole file
        await self.write_file(path, data)
        if advance:
            advance(len(data) - offset)

    async def forward(self, remote_port: int) -> tuple[str, int]:
        """The node's port from this machine: directly where the node is this machine (orch on the
        login node, the node the same host), else through a relay on the login node (`relayed`)."""
        if self.host.slurm is not None and self.host.slurm.login == "local" and (
                self.node in (socket.gethostname(), "localhost") or self.job.address(self.node) == "127.0.0.1"):
            return ("127.0.0.1", remote_port)
        return await self.relayed(remote_port)

    async def relayed(self, remote_port: int) -> tuple[str, int]:
        """127.0.0.1:`remote_port` on the node through a relay on the login node (one srun step per
        connection: `shell.slurm_relay`), reached through the login connection's own forward; one
        relay per port for the life of the connection, stopped when it closes."""
        if remote_port not in self._relays:
            done = await self.login.run(shell.slurm_relay(self.job.id, self.node, self.host.python, remote_port),
                                        timeout=30)
            fields = done.out.split()
            if not done.ok or len(fields) != 3 or fields[0] != shell.RELAY_MARK or not fields[2].isdigit():
                raise HostError(f"{self.host.name}: could not start a relay to port {remote_port} on node {self.node} "
                                f"on the login node: {_one_line(done.err or done.out)}; it needs python3 there")
            self._relays[remote_port] = (int(fields[1]), int(fields[2]))
        return await self.login.forward(self._relays[remote_port][1])

    async def close(self) -> None:
        """Stop the relays and release the allocation (even under a cancel), then close the login
        node's connection."""
        try:
            for pid, _ in self._relays.values():
                await uncancelled(self._quietly(shell.kill_pid(pid)))
            self._relays.clear()
            if self._release is not None:
                release_job, self._release = self._release, None
                await uncancelled(release_job())
        finally:
            if self._owns_login:
                await uncancelled(self.login.close())

    async def _quietly(self, command: str) -> None:
        try:
            await self.login.run(command, timeout=30, idempotent=True)
        except (OrchError, OSError):
            pass  # the login node went away: the relay ends with the job (it checks every 30 s)


def _tar(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(folder, arcname=".", filter=lambda info: None if "__pycache__" in info.name
                    or info.name.endswith(".pyc") else info)
    return buffer.getvalue()


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300] or "no message"
