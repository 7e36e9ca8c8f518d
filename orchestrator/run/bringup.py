"""The `do` steps of a run's stage list (`lifecycle.py`), each over every node of the run: rank 0's
Attempt first, then every other node at once (`multinode.on_peers`; none for a run on one host).
What only rank 0 does (the engine's reading of the command, the tool check, the disk and drift
checks, the preflight, the readiness wait, the workload) says so where it is done."""

from __future__ import annotations

import functools
import os
import time

from orchestrator.core import render, shell, spec as specs
from orchestrator.core.secrets import hide
from orchestrator.errors import HostError, ServerError
from orchestrator.host import diskspace, occupancy, patchcheck, server, treelock
from orchestrator.remote.group import uncancelled
from orchestrator.remote.reconnecting import reconnections
from . import collect, driftcheck, effective, multinode, preflight, rendercontext, serving, stages, tool, workload
from .attempt import Attempt, Stage
from .going import Going
from .preparing import prepare_patches

PORT_IN_USE = "port-in-use"  # the diagnosis kind of a server's own address-in-use exit (every engine's)


def _load(attempt: Attempt) -> specs.Workload:
    return attempt.plan.workload or attempt.spec.workload


async def _flags_accepted(node: Attempt) -> None:
    await node.engine.check_launch(node.session.reading(), node.launch.command, node.spec.template, node.says, node.label)


async def check_flags(going: Going) -> None:
    """Every node's launch command as its host's engine reads it; rank 0's reading kept (`effective`)."""
    lead = going.attempt
    lead.enter(Stage.CHECK_FLAGS)
    await _flags_accepted(lead)
    await effective.asked(lead)
    await multinode.on_peers(lead, _flags_accepted)
    if _load(lead).tool is not None:
        await tool.check(lead, _load(lead), lead.launch.port)


async def _gpus_free(node: Attempt, port: int) -> list[str]:
    """The node's port and its share of the GPUs free; the busy GPUs `--allow-busy-gpus` lets by."""
    return await occupancy.ensure_free(node.session.conn, node.session.host, port, multinode.gpus_per_node(node.plan),
                                       node.launch.visible, node.spec.allow_busy_gpus)


def _busy_allowed(node: Attempt, problems: list[str]) -> None:
    where = f"node {node.node}: " if node.node else ""
    for problem in problems:
        node.store.event(node.run, "busy-gpus-allowed", f"{where}orch run --allow-busy-gpus: {problem}")
        node.warn(f"{problem} (--allow-busy-gpus)")


async def _node_free(port: int, node: Attempt) -> None:
    _busy_allowed(node, await _gpus_free(node, port))


async def check_host(going: Going) -> None:
    """Every node's port (rank 0's, which they share) and GPUs; then rank 0's disk room, package
    tree locks and drift check, before anything changes; rank 0's busy GPUs are said last."""
    lead = going.attempt
    lead.enter(Stage.CHECK_HOST)
    port = lead.launch.port
    busy = await _gpus_free(lead, port)
    await multinode.on_peers(lead, functools.partial(_node_free, port))
    await _ensure_room(lead)
    await treelock.hold_plan(lead.session, () if lead.launch.isolated else lead.plan.patches, lead.run.uid,
                             lead.spec.lock_wait_s, lead.says)  # package trees other workdirs may share
    await driftcheck.gate(lead)  # a file changed by hand since orch left it: before anything changes
    _busy_allowed(lead, busy)


async def _ensure_room(attempt: Attempt) -> None:
    """Refuse a run on a disk too full for what it writes, before anything changes: its folder and
    journal under the workdir (a copy of each file it patches), and each patched file's new text."""
    session = attempt.session
    needs = {session.host.workdir: diskspace.RUN_FLOOR_BYTES}
    if not attempt.launch.isolated:  # an isolated run writes its copy under the workdir
        for patch in attempt.plan.patches:
            file = await session.resolve(patch)
            found = await session.reading().conn.stat(file)  # the installed file: kept until a patch changes it
            size = found.size if found is not None else 0
            needs[session.host.workdir] += size
            needs[file] = needs.get(file, 0) + size
    await diskspace.ensure_room(session.conn, session.host, needs)


async def push(going: Going) -> None:
    """Every node's checkpoints to their dests on its host."""
    going.attempt.enter(Stage.PUSH)
    await stages.push_checkpoints(going.attempt)
    await multinode.on_peers(going.attempt, stages.push_checkpoints)


async def check_checkpoints(going: Going) -> None:
    """Rank 0's preflight (the nodes load the same checkpoints)."""
    going.attempt.enter(Stage.PREFLIGHT)
    await preflight.gate(going.attempt)


async def _node_patched(node: Attempt) -> None:
    """The node's patches prepared and compiled on its own files, then applied, journal first,
    whole (uncancelled: the revert then undoes each)."""
    node.enter(Stage.PREPARE_PATCHES)
    prepared = await prepare_patches(node.session, node.plan)
    await patchcheck.ensure_compiles(node.session.reading().conn, node.session.host, prepared)
    node.enter(Stage.APPLY_PATCHES)
    await uncancelled(stages.apply_patches(node, prepared))


async def patch(going: Going) -> None:
    """Every node's patches (its own journal, the run's uid)."""
    await _node_patched(going.attempt)
    await multinode.on_peers(going.attempt, _node_patched)


async def adopt_patches(going: Going) -> None:
    """A run on the server another run left up: that run's patches, applied once, are its own too."""
    assert going.reuse is not None
    serving.adopt_patches(going.attempt, going.reuse)


async def launch(going: Going) -> None:
    """Every node's server launched and rank 0's ready (on another port once, when its own was
    taken at the bind); `attempt.serving` is set as soon as it is started."""
    attempt, metrics = going.attempt, going.tally.metrics
    port = attempt.launch.port
    started = time.monotonic()
    held = await _launch_and_wait(attempt, port)
    if held is None:  # the port was taken between the check and the server's bind: once more elsewhere
        port = await _move_to_a_free_port(attempt, port)
        held = await _launch_and_wait(attempt, port, relaunched=True)
        assert held is not None
    metrics["startup_s"] = time.monotonic() - started
    address = await attempt.session.conn.forward(port)
    held.base_url = f"http://{address[0]}:{address[1]}"
    attempt.say(f"ready after {metrics['startup_s']:.1f} s; {workload_said(_load(attempt))}")


async def join(going: Going) -> None:
    """The server another run of its key left up, used as it is (nothing launched)."""
    assert going.reuse is not None
    serving.join(going.attempt, going.reuse)
    going.attempt.say(workload_said(_load(going.attempt)))


async def _node_launched(port: int, peer: Attempt) -> None:
    srv = await server.launch(peer.session.conn, peer.launch.run_dir, peer.launch.command, port, peer.secrets)
    peer.serving = serving.Serving(peer, srv, users=[peer.run])
    peer.store.event(peer.run, "node-launched", f"node {peer.node} on {peer.launch.host}: pid {srv.pgid} "
                     f"in {srv.run_dir}")
    peer.say(f"node {peer.node} launched (pid {srv.pgid})")


async def _launch_and_wait(attempt: Attempt, port: int, relaunched: bool = False) -> serving.Serving | None:
    """Launch the server on `port` (every node's) and wait for rank 0's to be ready. None when it
    exited because the port was taken after orch's check (another user, or another inventory host
    on this machine): its relaunch on another port can still succeed (once; a run over several
    hosts shares the port with its other nodes, so it fails at once)."""
    session, store, run = attempt.session, attempt.store, attempt.run
    attempt.enter(Stage.LAUNCH)
    srv = await server.launch(session.conn, attempt.launch.run_dir, attempt.launch.command, port, attempt.secrets)
    held = serving.launched(attempt, srv)
    store.event(run, "launched", f"pid {srv.pgid} in {srv.run_dir}")
    await multinode.on_peers(attempt, functools.partial(_node_launched, port))
    attempt.say(f"server launched (pid {srv.pgid}); waiting for it to be ready")
    attempt.enter(Stage.WAIT_READY)
    try:
        held.read_so_far = await server.wait_ready(session.conn, srv, attempt.spec.ready_timeout, attempt.engine)
    except ServerError as exc:
        if relaunched or attempt.peers or exc.diagnosis is None or exc.diagnosis.kind != PORT_IN_USE:
            raise
        log = await stages.stop(attempt, srv)  # whatever of it is left; its log is the event's evidence
        attempt.serving = None
        store.event(run, "port-relaunch", f"port {port} was taken after the check, at the server's bind: "
                                          f"{exc.diagnosis.summary} (its log: {hide(' | '.join(server.tail(log, 5)), attempt.secrets)})")
        return None
    return held


async def _move_to_a_free_port(attempt: Attempt, taken: int) -> int:
    """A port free on the host now, put into the run's params, launch script and record."""
    session, spec = attempt.session, attempt.spec
    done = await session.conn.run(shell.free_port(session.host.python), timeout=30, idempotent=True)
    port = int(done.out.strip()) if done.ok and done.out.strip().isdigit() else 0
    if not port:
        raise HostError(f"{session.host.name}: port {taken} was taken at the server's bind and no free port could be "
                        f"found with {session.host.python} ({done.err.strip()[-200:]}); give the run a free port "
                        "(--set port=N)")
    await occupancy.ensure_free(session.conn, session.host, port, 0, None, True)  # nobody took it since
    context = rendercontext.on_port(attempt.context, port)
    attempt.rendered(context, render.launch_script(spec.template, context))
    attempt.run = attempt.store.update_run(attempt.run, params={**attempt.run.params, "port": port},
                                           command=hide(attempt.launch.command, attempt.secrets))
    attempt.store.event(attempt.run, "port-relaunch", f"relaunched on port {port}, free on the host now")
    attempt.warn(f"port {taken} was taken after the check, at the server's bind; relaunched on port {port}")
    return port


def workload_said(load: specs.Workload) -> str:
    if load.tool is not None:
        return f"running {load.tool}"
    if load.dataset is not None:
        count = f"{load.num_prompts} prompts" if load.num_prompts else "every prompt"
        return f"sending {count} of {os.path.basename(load.dataset)} ({load.format})"
    return f"sending {load.requests} requests"


async def send_workload(going: Going) -> None:
    """Rank 0's workload (the other nodes serve through it): the engine's own benchmark tool on the
    host (`tool.py`), or orch's requests; their measures are taken once the log is read."""
    attempt, tally = going.attempt, going.tally
    engine, load, metrics = attempt.engine, _load(attempt), tally.metrics
    attempt.enter(Stage.WORKLOAD)
    base_url = attempt.serving.base_url if attempt.serving is not None else ""
    tally.workload_from = len(reconnections(attempt.session.conn))  # a link reopened from now on cut the requests in flight
    if load.tool is not None:
        port = attempt.serving.srv.port if attempt.serving else attempt.launch.port
        tally.measure = await tool.run(attempt, load, port, metrics)
        return
    before = await engine.server_state(base_url)
    result = await workload.run(engine, base_url, load, workload.so_far(engine, attempt.known))
    tally.measure = functools.partial(engine.measures, result, before, await engine.server_state(base_url))
    metrics.update(collect.workload_metrics(result))
    collect.store_requests(attempt.store, tally.run, result, load)
