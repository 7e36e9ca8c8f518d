"""A `transport: slurm` host: a node of a Slurm allocation, reached through the cluster's login node.

Opening one asks Slurm for the nodes (`allocation.allocate`), waits while the job is queued (its state and
reason said as they change), learns the nodes from the job, and hands out a `NodeConnection` per
node; closing it releases the allocation (`scancel`), whatever happened. The host lifecycle
(`host/lifecycle.py`) opens and closes it, so a run's success, failure or interrupt all end there.

Each command of the host lifecycle runs on its node as a step of the job (`srun --jobid
--nodelist --overlap`, `core/shell/slurm.py` `slurm_step`: a step lives while what it started lives, so
a detached server outlives its launch command). Files under the host's workdir, which must be on
the cluster's shared filesystem, are read and written through the login node's own connection
(no step per file); other paths (an engine installed on the node's own disk) through steps.
Asking for the nodes and releasing them: `allocation.py`.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import secrets
import socket
import tarfile
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostError, OrchError
from .allocation import Job, Say, allocate, one_line, release_quietly
from .base import Completed, Connection, FileStat, Reconnection
from .group import uncancelled


def job_of(conn: Connection) -> Job | None:
    """The allocation a connection's node belongs to; None for any other host."""
    return conn.job if isinstance(conn, NodeConnection) else None


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
    async def open(cls, host: Host, say: Say, opener: Callable[[Host], Coroutine[Any, Any, Connection]]) -> NodeConnection:
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
                                f"{one_line(done.err or done.out)}")
        except BaseException:
            await uncancelled(conn.close())
            raise
        conn.home = done.out
        return conn

    def sibling(self, rank: int, host: Host) -> NodeConnection:
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
                            f"{one_line(done.err[len(shell.STEP_MARK):])}; is the job still running (`squeue -j "
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
            raise HostError(f"{self.host.name}: cannot read {path} on {self.node}: {one_line(done.err)}")
        return done.stdout

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        if self._shared(path):
            return await self.login.write_file(path, data, mode)
        done = await self.run(shell.write_stdin(path, mode), input=data, idempotent=True)
        if not done.ok:
            raise HostError(f"{self.host.name}: cannot write {path} on {self.node}: {one_line(done.err)}")

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
                            f"{one_line(done.err)}")

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
                                f"on the login node: {one_line(done.err or done.out)}; it needs python3 there")
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
