"""The one place that sequences the stages of a run. Cleanup (stop, revert) runs in `finally`.

    per host:  connect -> lock -> recover leftovers -> install rehearsal   (host/lifecycle.py)
    per run:   render -> check flags -> push checkpoints -> preflight -> prepare patches (every
               anchor checked, every patched .py compiled by the host's Python) -> apply patches (journal first) -> launch -> wait ready
               -> workload -> stop -> read the log once -> record -> revert patches
               (a run on the server another run of its key left up: workload -> ..., `serving.py`)
    per host:  unlock

The sweep around the runs (hosts, queue, GPU slots) is `sweep.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.host import diskspace, occupancy, patchcheck, server, treelock
from . import collect, driftcheck, effective, multinode, preflight, rendercontext, runstop, serving, stages, tool, workload
from .attempt import Attempt, Reporter, Stage, hiding, unfailing
from .dryrun import dry_run_nodes as dry_run_nodes, dry_run_one as dry_run_one  # named as execute.* too
from .outcome import Outcome as Outcome
from .preparing import prepare_patches as prepare_patches
from .rendercontext import run_context as run_context
from orchestrator.core import render, shell, spec as specs
from orchestrator import engines
from orchestrator.engines.base import Diagnosis, LogReport, Measures
from orchestrator.errors import HostError, OrchError, ServerError, WorkloadError
from orchestrator.remote.group import uncancelled
from orchestrator.remote.reconnecting import reconnections
from orchestrator.core.secrets import hide, mask_env, secret_values
from orchestrator.host.session import HostSession
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.core.clock import new_uid, now
from orchestrator.store.reading import FAILED, SUCCEEDED

if TYPE_CHECKING:  # the ORM is imported where a run is written: a dry run does without it
    from orchestrator.store.database import Run, Store


def controller() -> str:
    """This process as runs record it (`Run.controller`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _attempt(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter,
             reuse: serving.Serving | None, nodes: multinode.Nodes | None = None) -> Attempt:
    """The run's row recorded as started, and what its stages read. A run that uses another run's
    server (`reuse`) records that server's launch as its command. A run over several hosts (`nodes`)
    is rank 0's, with an Attempt per other node (`multinode.py`)."""
    host = session.host
    uid = new_uid(plan.variant)
    context = rendercontext.node_context(spec, plan, host, uid, nodes, 0)
    env = context["env"]
    hidden = secret_values(env, context["secret_names"])
    store.keep_secret(hidden)  # every row this run writes, errors and debug lines included
    script = reuse.launcher.script if reuse is not None else render.launch_script(spec.template, context)
    from orchestrator.store.database import Run  # the ORM only where a run is written

    run = Run(
        uid=uid, experiment=spec.name, variant=plan.variant, host=host.name, repeat=plan.repeat,
        spec_path=str(spec.path), spec=spec.raw, params={**context["params"], **_workload_params(spec, plan)},
        env=mask_env(env, context["secret_names"]), command=hide(script, hidden), controller=controller(),
        plan_key=plan.key, fingerprint=plan.fingerprint or None,  # what --resume matches (plankey)
        server_run_id=reuse.launcher.run.id if reuse is not None else None,
    )
    store.add(run)
    attempt = Attempt(spec, plan, engines.get(spec.engine), session, store, run, hiding(reporter, hidden), context,
                      f"{plan.variant}@{host.name} #{run.id}", script, hidden)  # the id: runs share hosts
    for rank, other in enumerate(nodes.peers if nodes is not None else (), 1):
        node_context = rendercontext.node_context(spec, plan, other.host, uid, nodes, rank)
        node_script = render.launch_script(spec.template, node_context)
        store.event(run, "node-script", f"node {rank} on {other.host.name}:\n{hide(node_script, hidden)}")
        store.save_log(run, b"", node=rank, host=other.host.name)  # its log once stopped; names its host now (recovery)
        attempt.peers.append(multinode.peer(attempt, other, rank, node_context, node_script))
    if nodes is not None:
        store.event(run, "nodes", multinode.described(session, nodes))
    return attempt


def _workload_params(spec: Spec, plan: RunPlan) -> dict[str, Any]:
    """The workload fields the plan sets over the experiment's, as `workload.NAME` params: what tells
    its run apart from the others of one server in `orch diff` and the summary."""
    load = plan.workload or spec.workload
    return {f"workload.{k}": v for k, v in dataclasses.asdict(load).items() if getattr(spec.workload, k) != v}


async def _bring_up(attempt: Attempt, metrics: dict[str, Any]) -> None:
    """Everything before the workload of a run that launches its own server: flags, host, checkpoints,
    preflight, patches, launch, readiness. `attempt.serving` is set as soon as the server is started."""
    spec, session, store, run = attempt.spec, attempt.session, attempt.store, attempt.run
    host, env, engine = session.host, attempt.launch.env, attempt.engine
    attempt.enter(Stage.CHECK_FLAGS)
    await engine.check_launch(session, attempt.script, spec.template, attempt.says, attempt.label)
    await effective.asked(attempt)
    await multinode.check_flags(attempt)
    if (attempt.plan.workload or spec.workload).tool is not None:
        await tool.check(attempt, attempt.plan.workload or spec.workload, _port(attempt))
    attempt.enter(Stage.CHECK_HOST)
    port = _port(attempt)
    busy = await occupancy.ensure_free(session.conn, host, port, multinode.gpus_per_node(attempt.plan),
                                       env.get("CUDA_VISIBLE_DEVICES"), spec.allow_busy_gpus)
    await multinode.check_hosts(attempt, port)
    await _ensure_room(attempt)
    await treelock.hold_plan(session, () if attempt.launch.isolated else attempt.plan.patches, run.uid,
                             spec.lock_wait_s, attempt.says)  # package trees other workdirs may share
    await driftcheck.gate(attempt)  # a file changed by hand since orch left it: before anything changes
    for problem in busy:
        store.event(run, "busy-gpus-allowed", f"orch run --allow-busy-gpus: {problem}")
        attempt.warn(f"{problem} (--allow-busy-gpus)")
    attempt.enter(Stage.PUSH)
    await stages.push_checkpoints(attempt)
    await multinode.push(attempt)
    attempt.enter(Stage.PREFLIGHT)
    await preflight.gate(attempt)
    attempt.enter(Stage.PREPARE_PATCHES)
    prepared = await prepare_patches(session, attempt.plan)
    await patchcheck.ensure_compiles(session.conn, host, prepared)
    attempt.enter(Stage.APPLY_PATCHES)
    await uncancelled(stages.apply_patches(attempt, prepared))  # whole: the revert then undoes each
    await multinode.patch(attempt, prepare_patches, uncancelled)
    started = time.monotonic()
    held = await _launch_and_wait(attempt, port)
    if held is None:  # the port was taken between the check and the server's bind: once more elsewhere
        port = await _move_to_a_free_port(attempt, port)
        held = await _launch_and_wait(attempt, port, relaunched=True)
        assert held is not None
    metrics["startup_s"] = time.monotonic() - started
    address = await session.conn.forward(port)
    held.base_url = f"http://{address[0]}:{address[1]}"


PORT_IN_USE = "port-in-use"  # the diagnosis kind of a server's own address-in-use exit (every engine's)


async def _launch_and_wait(attempt: Attempt, port: int, relaunched: bool = False) -> serving.Serving | None:
    """Launch the server on `port` and wait for it to be ready. None when it exited because the
    port was taken after orch's check (another user, or another inventory host on this machine):
    its relaunch on another port can still succeed (once; a run over several hosts shares the port
    with its other nodes, so it fails at once)."""
    session, store, run = attempt.session, attempt.store, attempt.run
    attempt.enter(Stage.LAUNCH)
    srv = await server.launch(session.conn, attempt.launch.run_dir, attempt.script, port, attempt.secrets)
    held = serving.launched(attempt, srv)
    store.event(run, "launched", f"pid {srv.pgid} in {srv.run_dir}")
    await multinode.launch(attempt, port)
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
    context = attempt.context
    context["port"] = context["params"]["port"] = port
    attempt.rendered(context, render.launch_script(spec.template, context))
    attempt.run = attempt.store.update_run(attempt.run, params={**attempt.run.params, "port": port},
                                           command=hide(attempt.script, attempt.secrets))
    attempt.store.event(attempt.run, "port-relaunch", f"relaunched on port {port}, free on the host now")
    attempt.warn(f"port {taken} was taken after the check, at the server's bind; relaunched on port {port}")
    return port


async def _ensure_room(attempt: Attempt) -> None:
    """Refuse a run on a disk too full for what it writes, before anything changes: its folder and
    journal under the workdir (a copy of each file it patches), and each patched file's new text."""
    session = attempt.session
    needs = {session.host.workdir: diskspace.RUN_FLOOR_BYTES}
    if not attempt.launch.isolated:  # an isolated run writes its copy under the workdir
        for patch in attempt.plan.patches:
            file = await session.resolve(patch)
            found = await session.conn.stat(file)
            size = found.size if found is not None else 0
            needs[session.host.workdir] += size
            needs[file] = needs.get(file, 0) + size
    await diskspace.ensure_room(session.conn, session.host, needs)


def _port(attempt: Attempt) -> int:
    return attempt.launch.port


def _workload_said(load: specs.Workload) -> str:
    if load.tool is not None:
        return f"running {load.tool}"
    if load.dataset is not None:
        count = f"{load.num_prompts} prompts" if load.num_prompts else "every prompt"
        return f"sending {count} of {os.path.basename(load.dataset)} ({load.format})"
    return f"sending {load.requests} requests"


async def _never() -> bool:
    return False


@dataclass
class _Tally:
    """What a run comes to as its stages go: set by the work, amended by the cleanup (an expectation
    failed, a revert left a file changed, a link cut the workload) and returned as its Outcome."""

    run: Run  # the row as the run started; the cleanup's last write replaces it
    links_from: int  # the reconnections before the run: earlier runs' reopened links are theirs
    status: str = FAILED
    error: str | None = None
    evidence: tuple[str, ...] = ()
    exit_code: int = 1
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    measure: Callable[[LogReport], Measures] | None = None  # the run's measures, once its log is read
    diagnosis: Diagnosis | None = None
    requests_failed: bool = False  # a request of the workload failed: a server that died under it says why
    workload_from: int | None = None  # the reconnections when the workload began, while it runs


async def run_one(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter,
                  kept: serving.Kept | None = None, keep: serving.Keep = _never,
                  nodes: multinode.Nodes | None = None) -> Outcome:
    """One run: its own server brought up, or the one `kept` holds (server reuse); its workload;
    then, when `keep()` says another plan of its server key is waiting, the server is left up in
    `kept` (its log read so far), else stopped and the patches reverted. With `nodes`, the run spans
    those hosts too, rank 0 on `session`'s (`multinode.py`; no reuse)."""
    reuse = kept.take() if kept is not None else None
    attempt = _attempt(spec, plan, session, store, reporter, reuse, nodes)
    run = attempt.run
    attempt.known(run=run.id, gpus=attempt.gpus, engine=spec.engine, plan=plan.key)  # its live table row
    attempt.say(f"run {run.id} ({run.uid}) started")
    tally = _Tally(run, len(reconnections(session.conn)))
    try:
        await _work(attempt, tally, reuse)
    except OrchError as exc:
        tally.error, tally.evidence, tally.exit_code = str(exc), exc.evidence, exc.exit_code
        tally.requests_failed = isinstance(exc, WorkloadError) and attempt.stage == Stage.WORKLOAD
        tally.diagnosis = exc.diagnosis if isinstance(exc, ServerError) else None
        if tally.diagnosis is not None:
            store.update_run(run, diagnosis=tally.diagnosis.as_record())
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        # a signal to `orch run` cancels its runs (cli/interrupt.py); the cancel names the signal
        tally.status, tally.error, tally.exit_code = runstop.cancelled(exc)  # one run stopped alone, or the sweep
        raise
    finally:
        await uncancelled(_clean_up(attempt, tally, reuse, kept, keep))  # a second signal never cuts a stop or a revert short
    hidden, t = attempt.secrets, tally
    error, evidence = (hide(t.error, hidden) if t.error else t.error), tuple(hide(e, hidden) for e in t.evidence)
    return Outcome(t.run.id, t.run.uid, plan.variant, session.host.name, t.status, t.metrics, tuple(t.flags), error,
                   evidence, t.exit_code)


async def _work(attempt: Attempt, tally: _Tally, reuse: serving.Serving | None) -> None:
    """The run's server brought up (or joined) and its workload sent; the tally says it succeeded."""
    spec, session, engine, store, metrics = attempt.spec, attempt.session, attempt.engine, attempt.store, tally.metrics
    load = attempt.plan.workload or spec.workload
    async with multinode.watched(attempt):  # another node failing cuts the run short at once
        if reuse is None:
            await _bring_up(attempt, metrics)
            attempt.say(f"ready after {metrics['startup_s']:.1f} s; {_workload_said(load)}")
        else:
            serving.join(attempt, reuse)
            attempt.say(_workload_said(load))
        attempt.enter(Stage.WORKLOAD)
        base_url = attempt.serving.base_url if attempt.serving is not None else ""
        tally.workload_from = len(reconnections(session.conn))  # a link reopened from now on cut the requests in flight
        if load.tool is not None:  # the engine's own benchmark tool, on the host (`tool.py`)
            tally.measure = await tool.run(attempt, load, attempt.serving.srv.port if attempt.serving else _port(attempt),
                                           metrics)
        else:
            before = await engine.server_state(base_url)
            result = await workload.run(engine, base_url, load, workload.so_far(engine, attempt.known))
            tally.measure = functools.partial(engine.measures, result, before, await engine.server_state(base_url))
            metrics.update(collect.workload_metrics(result))
            collect.store_requests(store, tally.run, result, load)
    tally.workload_from = None  # the workload is done: a later drop cuts none of its requests
    tally.status, tally.exit_code = SUCCEEDED, 0  # unless the measures fail an expectation (after the stop)


async def _clean_up(attempt: Attempt, t: _Tally, reuse: serving.Serving | None, kept: serving.Kept | None,
                    keep: serving.Keep) -> None:
    """Whatever happened: the server stopped (or kept for the next plan of its key), the log read
    once and recorded, the measures checked, the patches reverted, the run's row closed."""
    spec, session, store, engine, run = attempt.spec, attempt.session, attempt.store, attempt.engine, t.run
    attempt.reporter = unfailing(attempt.reporter)  # a closed terminal or pipe loses lines, not the cleanup
    if attempt.serving is None and attempt.stage in _LAUNCHING:  # cancelled while the launch command ran
        found = await _launched(session, attempt.launch.run_dir, _port(attempt))
        if found is not None:
            serving.launched(attempt, found)
    held = attempt.serving
    log, cleanup_errors = b"", []
    stopping = asyncio.ensure_future(multinode.stop(attempt))  # the other nodes at once, beside rank 0
    segment = await serving.kept_segment(attempt, keep) if t.status == SUCCEEDED and kept is not None else None
    if segment is not None:
        log = segment
    else:
        try:
            attempt.enter(Stage.STOP)
            log = serving.own_part(held, await stages.stop(attempt, held.srv if held else None))
        except (OrchError, OSError) as exc:  # the log read while waiting for readiness is what there is
            cleanup_errors.append(exc)
            log = held.read_so_far if held is not None and not held.log_offset else b""
    node_logs = await stopping
    attempt.enter(Stage.READ_LOG)
    log_report = engine.parse_log(log, spec.debug_pattern, _patched_files(store, run))  # the one reading
    attempt.enter(Stage.RECORD)
    if held is not None:
        collect.store_log(store, run, log, log_report)
        if reuse is None:  # the launching run's log holds the engine's print of its arguments
            effective.record(attempt, log_report, log)
        else:  # its part of the log does not: it ran on the launcher's server, with its arguments
            effective.inherit(attempt, reuse.launcher.run.id)
    multinode.record_logs(node_logs, _patched_files(store, run))
    if t.measure is not None:
        found_flags, notes = collect.record(store, run, t.metrics, t.measure(log_report))
        attempt.known(**t.metrics)  # accept length, tokens/s
        t.flags.extend(found_flags)
        for note in notes:
            attempt.say(note)
        failed_expectations = collect.check_expectations(attempt.plan, t.metrics)
        if failed_expectations:
            t.status, t.exit_code = FAILED, 1
            t.error = "expectation failed: " + "; ".join(failed_expectations)
    if t.status == FAILED and log_report.diagnosis is not None and (t.diagnosis is None or log_report.diagnosis.decisive):
        # the whole log, read knowing the patched files, names the cause: it replaces the one made when the server died
        store.update_run(run, diagnosis=log_report.diagnosis.as_record())
        if t.requests_failed:
            # a request failed because the server died under it: the server's cause first
            t.error = f"the server failed during the workload: {log_report.diagnosis.summary} ({t.error})"
    if segment is not None and kept is not None:
        kept.serving = held
    else:
        t.error, t.status, t.exit_code = await _revert(attempt, held, cleanup_errors, t.flags, t.error, t.status,
                                                       t.exit_code)
        left = await multinode.revert(attempt)  # every other node's, whatever happened on rank 0's
        if left:
            t.error = "; ".join([*([t.error] if t.error else []), *left])
            t.status, t.exit_code = (FAILED, 1) if t.status == SUCCEEDED else (t.status, t.exit_code)
    cut = collect.record_reconnections(store, run, session.host.name, reconnections(session.conn), t.links_from,
                                       t.workload_from)
    if cut and t.status == FAILED:
        t.error = (f"{t.error}; " if t.error else "") + cut
    t.run = store.update_run(run, status=t.status, error=t.error, flags=t.flags, ended_at=now())
    attempt.known(status=t.status)
    attempt.say(f"run {t.run.id} {t.status}" + (f": {t.error}" if t.error else ""))


async def _revert(attempt: Attempt, held: serving.Serving | None, cleanup_errors: list[BaseException],
                  flags: list[str], error: str | None, status: str, exit_code: int) -> tuple[str | None, str, int]:
    """The run's revert (of the launching run's patches, for a run that used another's server),
    even when the stop failed: returns the run's error, status and exit code after it."""
    try:
        attempt.enter(Stage.REVERT)
        owner = held.launcher if held is not None else None
        drifted = await stages.revert_patches(attempt, owner, held.later_users if held is not None else ())
        if cleanup_errors:
            raise cleanup_errors[0]
        if drifted:  # the promise is an unmodified install: a file left changed fails the run
            flags.append("patch-drifted")
            error = (f"{error}; " if error else "") + f"{len(drifted)} patched file(s) changed during the run " \
                f"and were left as they are: {', '.join(drifted)}; see `orch patches`"
            status, exit_code = (FAILED, 1) if status == SUCCEEDED else (status, exit_code)
    except (OrchError, OSError) as exc:
        error = (f"{error}; " if error else "") + f"cleanup failed: {exc}"
        if status == SUCCEEDED:  # a run whose cleanup left something changed never exits 0
            status, exit_code = FAILED, exc.exit_code if isinstance(exc, OrchError) else 3
        attempt.store.event(attempt.run, "cleanup-failed", str(exc))
    return error, status, exit_code


def _patched_files(store: Store, run: Run) -> list[str]:
    """The files the run's patches touched, as written and as resolved: a diagnosis names them."""
    from orchestrator.store.database import PatchRow

    return [path for patch in store.children(run, PatchRow) for path in (patch.file, patch.target)]


_LAUNCHING = (Stage.LAUNCH, Stage.WAIT_READY)
LAUNCH_PID_WAIT_S = 5.0  # the launch command waits as long for the wrapper's pid file


async def _launched(session: HostSession, run_dir: str, port: int) -> server.Server | None:
    """The server a launch cut short by a signal may have started: its wrapper writes its pid
    within the launch command's wait; None when it never started."""
    deadline = time.monotonic() + LAUNCH_PID_WAIT_S
    while True:
        try:
            pid = (await session.conn.read_file(f"{run_dir}/pid")).decode().strip()
        except FileNotFoundError:
            pid = ""
        if pid.isdigit():
            return server.Server(run_dir, int(pid), port)
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.1)


