"""A run over several hosts (`nodes: N`): one server launched on N hosts at once, rank 0 serving.

The run is rank 0's (`execute.run_one` on its host); every other node is an `Attempt` of the same
run on its own host (`Attempt.peers`, in rank order), and each stage of the run's list
(`lifecycle.py`) does rank 0's part, then theirs (`on_peers`):

    check flags, check host (port, the node's share of the GPUs: tp_size / nodes), push checkpoints,
    prepare patches (anchors, compile), apply patches (each node's own journal, the run's uid)
        -> every node; the preflight on rank 0 only
    launch -> every node at once, each with its own script (`{{ node_rank }}`, `{{ nnodes }}`,
              `{{ dist_init_addr }}`: rank 0's address as the others reach it and a free port there);
              rank 0's script is the run's command, each other's a "node-script" event
    readiness, workload -> rank 0, while every other node is watched (`watched`): a node whose
              server exits, or whose link is lost, cancels the run at once with that node's error
    stop -> every node at once; logs -> rank 0's the run's log, each other's a `NodeLogRow`, debug
            lines and series tagged with the node; revert -> every node, whatever happened

A run over several hosts never reuses a server and never leaves one up (the gang that runs it,
`gang.py`, hands it no `Kept`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

from orchestrator import remote
from orchestrator.core.inventory import Host
from orchestrator.core.spec import RunPlan
from orchestrator.engines.base import Diagnosis, Engine
from orchestrator.errors import HostError, OrchError, ServerError, SpecError
from orchestrator.host import occupancy, server
from orchestrator.host.session import HostSession, package_dir, package_version
from orchestrator.store.rowid import stored_id
from . import logrows, serving, stages
from .attempt import Attempt, Stage
from .launch import Launch

DIST_PORT = 29500  # torch.distributed's usual master port; the first free one from here on rank 0
DIST_PORT_TRIES = 32
WATCH_SECONDS = 0.3  # between two looks at the other nodes' servers
EVIDENCE_CHARS = 300  # of each log line a diagnosis quotes (the arguments line is kilobytes long)


class NodeContext(TypedDict):
    """What node `node_rank`'s launch script renders with besides the run's own context."""

    node_rank: int
    nnodes: int
    dist_init_addr: str  # host:port
    dist_init_host: str
    dist_init_port: int


@dataclass(frozen=True)
class Nodes:
    """The other nodes of a run over several hosts (in rank order) and rank 0's rendezvous address."""

    peers: tuple[HostSession, ...]
    dist_host: str
    dist_port: int

    @property
    def count(self) -> int:
        return len(self.peers) + 1

    def context(self, rank: int) -> NodeContext:
        """What node `rank`'s launch script renders with (besides the run's own context)."""
        return {"node_rank": rank, "nnodes": self.count, "dist_init_addr": f"{self.dist_host}:{self.dist_port}",
                "dist_init_host": self.dist_host, "dist_init_port": self.dist_port}


def described(lead: HostSession, nodes: Nodes) -> str:
    """Which host is which node, and where they meet: `node 0 a, node 1 b; rendezvous at ADDR:PORT`."""
    names = ", ".join(f"node {rank} {s.host.name}" for rank, s in enumerate((lead, *nodes.peers)))
    return f"{names}; rendezvous at {nodes.dist_host}:{nodes.dist_port}"


def gpus_per_node(plan: RunPlan) -> int:
    """The GPUs each node gives the run: its tensor-parallel size split over its nodes."""
    tp = plan.tp_size
    if tp % plan.nodes:
        raise SpecError(f"variant '{plan.variant}': tp_size={tp} does not split over nodes={plan.nodes}; "
                        "make tp_size a multiple of nodes")
    return tp // plan.nodes


def address(host: Host) -> str:
    """Where the other nodes reach `host`: its inventory address, 127.0.0.1 for this machine."""
    return "127.0.0.1" if remote.is_this_machine(host) or not host.address else host.address


async def dist_port(session: HostSession) -> int:
    """A port no process listens on at rank 0's host, for the nodes' rendezvous."""
    for port in range(DIST_PORT, DIST_PORT + DIST_PORT_TRIES):
        if not (await occupancy.listener(session.conn, session.host, port)).listening:
            return port
    raise HostError(f"{session.host.name}: ports {DIST_PORT}-{DIST_PORT + DIST_PORT_TRIES - 1} are all taken; "
                    "no free port for the nodes' rendezvous: free one of them there, or put another host first")


async def same_engine(sessions: Sequence[HostSession], engine: Engine) -> str:
    """The engine version every node has (from its version file, read before anything changes);
    HostError naming two hosts that differ."""
    versions = []
    for session in sessions:
        folder = await package_dir(session.conn, session.host, session.packages, engine.package)
        found = await package_version(session.conn, folder, engine.version_files()) if folder else "not installed"
        versions.append((session.host.name, found))
    first = versions[0]
    for other in versions[1:]:
        if other[1] != first[1]:
            raise HostError(f"the nodes of one run need the same {engine.name}: {first[0]} has {first[1]}, "
                            f"{other[0]} has {other[1]}; choose hosts with one version (`orch hosts check`)")
    return first[1]


async def meeting(sessions: Sequence[HostSession], engine: Engine, dist_host: str) -> Nodes:
    """The nodes of a run over `sessions` (rank 0 first), meeting at `dist_host` on a port free
    there now, once every node is checked to have the same engine version."""
    await same_engine(sessions, engine)
    return Nodes(tuple(sessions[1:]), dist_host, await dist_port(sessions[0]))


async def on_peers(lead: Attempt, work: Callable[[Attempt], Awaitable[None]]) -> None:
    """`work` on every other node at once (none for a run on one host); the first failure is raised
    once all are done. A stage does rank 0's part, then this (`bringup.py`)."""
    results = await asyncio.gather(*(work(peer) for peer in lead.peers), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


@asynccontextmanager
async def watched(lead: Attempt) -> AsyncIterator[None]:
    """The body runs while every other node's server is watched: one that exits, or whose host no
    longer answers, cancels the body at once and its error is raised instead."""
    if not lead.peers:
        yield
        return
    body = asyncio.current_task()
    assert body is not None
    failed: list[OrchError] = []
    offsets = {peer.node: 0 for peer in lead.peers}

    async def look() -> OrchError | None:  # every node at once: one round trip's wait, not one per node
        errors = await asyncio.gather(*(_looked_at(p, offsets) for p in lead.peers if p.serving is not None))
        return next((error for error in errors if error is not None), None)

    async def watch() -> None:
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            error = await look()
            if error is not None:
                failed.append(error)
                body.cancel(_NODE_FAILED)
                return

    watcher = asyncio.create_task(watch())
    try:
        yield
    except asyncio.CancelledError as exc:
        if failed and exc.args == (_NODE_FAILED,):
            body.uncancel()
            raise failed[0] from None
        raise
    except OrchError:
        # rank 0 failing may be its peers' doing (its server exits when a node drops): that node's
        # failure is the run's, when there is one (the watcher saw it, or one more look does)
        watcher.cancel()
        cause = failed[0] if failed else await look()
        if cause is None:
            raise
        if body.cancelling():
            body.uncancel()
        raise cause from None
    finally:
        watcher.cancel()


_NODE_FAILED = "a node of the run failed"


async def _looked_at(peer: Attempt, offsets: dict[int, int]) -> OrchError | None:
    """The node's failure, if its server has exited or its host does not answer; else None."""
    assert peer.serving is not None
    host, srv = peer.launch.host, peer.serving.srv
    try:
        status = await server.poll(peer.session.conn, srv, offsets[peer.node])
        offsets[peer.node] += len(status.new_bytes)
        if status.alive and status.exit_code is None:
            return None
        log = await server.read_log(peer.session.conn, srv, peer.engine, peer.spec.debug_pattern)
    except (OrchError, OSError) as exc:
        return HostError(f"{host}: node {peer.node} of the run lost: {exc}")
    found = peer.engine.diagnose(log)
    code = "unknown" if status.exit_code is None else str(status.exit_code)
    reason = found.summary if found else "no known failure signature in its log"
    diagnosis = found or Diagnosis("node-exited", f"node {peer.node} ({host}): the server exited (exit code {code}) "
                                   "with no known failure signature in its log; see `orch logs`",
                                   tuple(line[:EVIDENCE_CHARS] for line in server.tail(log, 3)))
    return ServerError(f"{host}: node {peer.node}'s server exited (exit code {code}): {reason}",
                       evidence=tuple(server.tail(log)), diagnosis=diagnosis)


async def stop(lead: Attempt) -> list[tuple[Attempt, bytes]]:
    """Every other node's server stopped at once; (node, its log) for each one launched. A node
    that cannot be reached keeps its server (its host's next lock or `orch stop` stops it)."""
    async def one(peer: Attempt) -> tuple[Attempt, bytes]:
        conn, host = peer.session.conn, peer.launch.host
        try:
            if peer.serving is None and lead.stage in (Stage.LAUNCH, Stage.WAIT_READY):
                await _cut_short_launch(peer)  # an interrupt came while its launch command ran
            if peer.serving is None:
                return peer, b""
            srv = peer.serving.srv
            stopped = await server.stop(conn, srv)
            peer.store.event(peer.run, "node-stopped", f"node {peer.node} ({host}): "
                             f"{stopped.summary(server.STOP_GRACE_SECONDS)}")
            return peer, await server.read_log(conn, srv, peer.engine, peer.spec.debug_pattern)
        except (OrchError, OSError) as exc:
            peer.store.event(peer.run, "cleanup-failed", f"node {peer.node} ({host}): could not stop its server: {exc}")
            return peer, b""
    return list(await asyncio.gather(*(one(peer) for peer in lead.peers)))


async def _cut_short_launch(peer: Attempt) -> None:
    """The server a launch cut short may have started: its wrapper's pid file says so."""
    run_dir = peer.launch.run_dir
    try:
        pid = (await peer.session.conn.read_file(f"{run_dir}/pid")).decode().strip()
    except FileNotFoundError:
        return
    if pid.isdigit():
        port = peer.launch.port
        peer.serving = serving.Serving(peer, server.Server(run_dir, int(pid), port), users=[peer.run])


def record_logs(logs: Sequence[tuple[Attempt, bytes]], patched: Sequence[str]) -> None:
    """Each other node's log, its debug lines and series, tagged with its rank."""
    from orchestrator.store.database import DebugRow, SeriesBlockRow
    for peer, log in logs:
        if peer.serving is None:
            continue
        store, run = peer.store, peer.run
        report = peer.engine.parse_log(log, peer.spec.debug_pattern, patched)
        store.save_log(run, log, node=peer.node, host=peer.launch.host)
        store.add_children(SeriesBlockRow, logrows.series_blocks(stored_id(run), report, peer.node))
        store.add_children(DebugRow, logrows.debug_values(stored_id(run), report, peer.node))


async def revert(lead: Attempt) -> list[str]:
    """Every other node's patches reverted (each its own journal); the problems, one per node."""
    async def one(peer: Attempt) -> str | None:
        host = peer.launch.host
        try:
            drifted = await stages.revert_patches(peer)
        except (OrchError, OSError) as exc:
            peer.store.event(peer.run, "cleanup-failed", f"node {peer.node} ({host}): {exc}")
            return f"cleanup failed on node {peer.node} ({host}): {exc}"
        if drifted:
            return f"node {peer.node}: {len(drifted)} patched file(s) changed during the run and were left: {', '.join(drifted)}"
        return None
    return [p for p in await asyncio.gather(*(one(peer) for peer in lead.peers)) if p]


def peer(lead: Attempt, session: HostSession, context: dict[str, Any], launch: Launch) -> Attempt:
    """The lead's run on another node, on `session`'s host: the same run row, its own context and
    launch (its rank, its script)."""
    return dataclasses.replace(lead, session=session, context=context, launch=launch, peers=[],
                               label=f"{lead.label} node {launch.node}@{launch.host}", stage=None, serving=None)
