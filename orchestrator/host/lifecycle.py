"""One host's lifecycle, the same for every command that works on hosts (run, check, revert,
clean, patches):

    open -> lock -> recover leftovers -> install the rehearsal stand-in -> the command's work
         -> unlock -> close

`on_hosts` runs it on every host at once through `remote.group.fan_out` (the only fan-out); a
command says what it needs with a `Locking` (None: it only reads the host, so takes no lock and
recovers nothing) and the engine whose stand-in a rehearsal host gets (None: nothing installed).
"""

from __future__ import annotations

import dataclasses
import posixpath
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.core.spec import PatchDef
from orchestrator.engines.base import Engine, Say
from orchestrator.errors import HostError, OrchError
from orchestrator.remote.group import fan_out, uncancelled
from orchestrator.remote.slurm import NodeConnection
from . import lockwait, rehearsal, treelock
from .journal import Journal
from .lock import HostLock
from .recovery import Recovery, recover
from .session import HostSession

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Store

T = TypeVar("T")


@dataclass(frozen=True)
class Locking:
    """What a command that changes a host takes: the lock (named for `purpose`), then the cleanup
    of dead commands' leftovers, recorded in `store`."""

    purpose: str  # "run", "revert", "clean": who holds the lock, as `orch` prints it to others
    store: Store
    force: bool = False  # recovery also restores files that changed after orch patched them
    lease_note: Callable[[str], str] | None = None  # keep the lease renewed, naming what runs on the host now
    wait_s: float | None = None  # a lock another command holds is waited for this long (`host/lockwait.py`)


@dataclass(frozen=True)
class Held:
    """A host ready for a command's work."""

    session: HostSession
    lock: HostLock | None  # None when the command only reads
    recovery: Recovery | None  # what was cleaned up before the work (None without a lock)


async def open_session(host: Host, say: Say | None = None) -> HostSession:
    """The host's session; an OS-level failure to connect is a HostError (exit 3). A slurm host's
    allocation is made here (its queue state said through `say`) and released when the session
    closes (`remote/slurm.py`): after the command's work and its cleanup, whatever ended them."""
    try:
        return await HostSession.open(host, say)
    except OSError as exc:
        raise HostError(f"{host.name}: cannot connect: {exc}") from None


@asynccontextmanager
async def holding(session: HostSession, say: Say, locking: Locking | None = None,
                  stand_in: Engine | None = None) -> AsyncIterator[Held]:
    """Lock, recover and install on an open session; unlock on the way out, whatever happened."""
    host = session.host
    lock: HostLock | None = None
    recovery: Recovery | None = None
    try:
        if locking is not None:
            taking = HostLock(session.conn, host.workdir, locking.purpose)
            broken = await lockwait.acquire(taking, locking.wait_s, say)
            lock = taking
            recovery = await recover(session, locking.store, say, force=locking.force, broken=broken)
            for node in await _node_folders(session):  # what a run over several nodes of a job left there
                await recover(node, locking.store, say, force=locking.force)
            if locking.lease_note is not None:
                note = locking.lease_note
                lock.keep_alive(lambda: note(host.name))
        if stand_in is not None and host.rehearsal:
            say(host.name, f"installing the rehearsal {stand_in.name}")
            await rehearsal.install(session.conn, host, stand_in)
            session.reads.clear()  # a fresh copy replaces the files a read may have kept
        yield Held(session, lock, recovery)
    finally:
        await treelock.release_host(host.name, say)  # the package trees its runs patched (`treelock.py`)
        if lock is not None:
            await _release(lock, say)


async def job_nodes(session: HostSession, count: int, say: Say, stand_in: Engine | None = None) -> list[HostSession]:
    """Sessions on nodes 1..`count`-1 of the Slurm job `session` is node 0 of, each as a host
    `ENTRY:NODE` with a folder of its own under the entry's workdir (`nodes/NODE`: its run folders,
    journal and rehearsal stand-in); rank 0's lock on the workdir covers them. Closing one leaves
    the job and the login connection to `session`."""
    first = session.conn
    assert isinstance(first, NodeConnection)
    job = first.job
    if len(job.nodes) < count:
        raise HostError(f"{session.host.name}: slurm {job.describe()} has {len(job.nodes)} node(s); the run needs "
                        f"{count}: the entry's job is sized by its widest plan; run the sweep again")
    nodes = []
    for rank in range(1, count):
        host = _node_host(session.host, job.nodes[rank])
        conn = first.sibling(rank, host)
        nodes.append(HostSession(host, conn, Journal(conn, host.workdir)))
        if stand_in is not None and host.rehearsal:
            say(host.name, f"installing the rehearsal {stand_in.name}")
            await rehearsal.install(conn, host, stand_in)
    return nodes


def _node_host(entry: Host, node: str) -> Host:
    return dataclasses.replace(entry, name=f"{entry.name}:{node}", workdir=f"{entry.workdir.rstrip('/')}/nodes/{node}")


async def _node_folders(session: HostSession) -> list[HostSession]:
    """A Slurm entry's node folders (`job_nodes`), each as its host `ENTRY:NODE` on this session's
    connection: the lock holder recovers them with its own folder, whatever nodes its job has now.
    Right for files on the shared storage (where a node's folder is); a node's own disk is reached
    from its own node only, so a file there that node 0 sees unpatched is left and said (drifted)."""
    if session.host.slurm is None:
        return []
    done = await session.conn.run(shell.list_dirs(f"{session.host.workdir.rstrip('/')}/nodes"), idempotent=True)
    hosts = [_node_host(session.host, name) for name in done.out.split()]
    return [HostSession(host, session.conn, Journal(session.conn, host.workdir)) for host in hosts]


async def own_files(nodes: list[HostSession], patches: Iterable[PatchDef]) -> None:
    """A run over several nodes patches each node's own files (its journal, its revert), so nodes
    of one Slurm job that see one copy of a patched file (an engine on the cluster's shared storage)
    would patch it twice: a HostError naming the node, the file and what to do, before anything
    changes. One copy or two is told by a probe file node 0 writes beside the file (then removes)
    and the other node looks for; a file at another path on each node (each node's own install)
    needs no probe."""
    first, probes = nodes[0], {}
    try:
        for patch in patches:
            target = await first.resolve(patch)
            for rank, node in enumerate(nodes[1:], 1):
                if await node.resolve(patch) != target:
                    continue
                folder = posixpath.dirname(target)
                if folder not in probes:
                    probes[folder] = f"{folder}/.orch-probe-{secrets.token_hex(8)}"
                    await first.conn.write_file(probes[folder], b"")
                if await node.conn.stat(probes[folder]) is not None:
                    raise HostError(f"{node.host.name}: node {rank} sees node 0's copy of {target} (shared storage): a "
                                    f"run over several nodes patches each node's own files, so patch '{patch.name}' "
                                    "would be applied twice; install the engine on each node's own disk, or run this "
                                    "plan without patches")
    finally:
        if probes:
            await uncancelled(_quietly_removed(first, list(probes.values())))


async def _quietly_removed(session: HostSession, paths: list[str]) -> None:
    try:
        await session.conn.run(shell.remove_files(*paths), timeout=60, idempotent=True)
    except (OrchError, OSError):
        pass  # a probe left behind is an empty dot-file; nothing reads it


async def _release(lock: HostLock, say: Say) -> None:
    try:
        await lock.release()
    except (OrchError, OSError) as exc:  # the host went away: the lease runs out on its own
        say(lock.conn.host.name, f"warning: could not remove {lock.path} ({exc}); it expires with its lease")


async def on_hosts(hosts: Iterable[Host], work: Callable[[Held], Awaitable[T]], say: Say,
                   locking: Locking | None = None, stand_in: Engine | None = None) -> dict[str, T | OrchError]:
    """`work` on every host at once, each inside its lifecycle: `{host name: result or the
    OrchError that stopped it}`, in host order (a bug propagates once every host is done)."""

    async def one(session: HostSession) -> T:
        async with holding(session, say, locking, stand_in) as held:
            return await work(held)

    return await fan_out(hosts, one, opener=lambda host: open_session(host, say))
