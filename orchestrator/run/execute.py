"""The one place that sequences the stages of a run. Cleanup (stop, revert) runs in `finally`.

    per host:  connect -> lock -> recover leftovers -> install rehearsal   (host/lifecycle.py)
    per run:   render -> check flags -> push checkpoints -> preflight -> prepare patches (every
               anchor checked, every patched .py compiled by the host's Python) -> apply patches (journal first) -> launch -> wait ready
               -> workload -> stop -> read the log once -> record -> revert patches
    per host:  unlock
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field
from collections.abc import Coroutine
from typing import Any, cast

from orchestrator.host import lifecycle, occupancy, overlay, patchcheck, server
from . import collect, preflight, sharing, stages, workload
from .queue import Entry, Queue, check_fits
from .slots import Lease, Slots, able
from .attempt import Attempt, Reporter, Stage, hiding
from orchestrator.core import patching, render, spec as specs
from orchestrator import engines
from orchestrator.engines.base import Engine, ServerState, WorkloadResult
from orchestrator.store import database as store_queries
from orchestrator.errors import EXIT_INTERRUPTED, HostBusy, HostError, OrchError, ServerError
from orchestrator.core.inventory import Host
from orchestrator.host.journal import APPLIED, DRIFTED
from orchestrator.host.lifecycle import Held, Locking
from orchestrator.remote.reconnecting import reconnections
from orchestrator.core.secrets import hide, mask_env, redact, secret_values
from orchestrator.host.session import HostSession
from orchestrator.core.spec import PatchDef, RunPlan, Spec
from orchestrator.core.clock import new_uid, now
from orchestrator.store.database import FAILED, INTERRUPTED, SUCCEEDED, PatchRow, Run, Store


@dataclass(frozen=True)
class Outcome:
    """What became of one planned run: its row in the store (`run_id` None when it never became a
    run), its status and metrics, and the error and exit code when it did not succeed."""

    run_id: int | None
    uid: str
    variant: str
    host: str
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    error: str | None = None
    evidence: tuple[str, ...] = ()
    exit_code: int = 0


def schedule(plans: list[RunPlan], hosts: list[Host]) -> dict[str, list[RunPlan]]:
    """Each plan on the least-loaded host with enough GPUs for it: where `orch check` looks at it
    (a run takes its plans from one queue instead, `run_all`)."""
    check_fits(plans, hosts)
    queues: dict[str, list[RunPlan]] = {h.name: [] for h in hosts}
    for plan in plans:
        target = min((h for h in hosts if able(h, plan)), key=lambda h: len(queues[h.name]))
        queues[target.name].append(plan)
    return {name: queue for name, queue in queues.items() if queue}


async def run_all(
    spec: Spec, plans: list[RunPlan], hosts: list[Host], store: Store, reporter: Reporter, *, dry_run: bool = False
) -> list[Outcome]:
    """Hosts in parallel (one lifecycle each, `host/lifecycle.py`), each taking its runs from one
    queue and running as many at once as its GPU slots hold (`slots.py`); outcomes in plan order."""
    check_fits(plans, hosts)
    queue = Queue(plans)
    engine = engines.get(spec.engine)
    # a dry run changes nothing, so it needs no lock and recovers nothing; a run's lease names its run
    locking = None if dry_run else Locking("run", store, lease_note=lambda host: _current_run(store, host))

    async def worker(held: Held) -> list[tuple[int, Outcome]]:
        return await _host_worker(spec, engine, queue, held, store, reporter, dry_run)

    results = await lifecycle.on_hosts(hosts, worker, reporter.message, locking, engine)
    done: list[tuple[int, Outcome]] = []
    for name, result in results.items():
        if isinstance(result, OrchError):
            # whole, before the summary table wraps it (or says nothing of it: its plans ran elsewhere)
            reporter.message(name, f"{'refused' if isinstance(result, HostBusy) else 'left the sweep'}: {result}")
            queue.lost.setdefault(name, result)
        else:
            done.extend(result)
    for entry, name, error in queue.left(hosts):  # every host that could run them went away
        done.append((entry.order, Outcome(None, "-", entry.plan.variant, name, FAILED, error=str(error),
                                          exit_code=error.exit_code)))
    return [outcome for _, outcome in sorted(done, key=lambda d: d[0])]


SLOT_PORT_TRIES = 16


async def _host_worker(spec: Spec, engine: Engine, queue: Queue, held: Held, store: Store,
                       reporter: Reporter, dry_run: bool) -> list[tuple[int, Outcome]]:
    """Runs taken from the queue while some fit the host, each in its slot as its own task; a
    cancel reaches every one of them (each cleans up its own run)."""
    session = held.session
    slots = Slots(session.host)
    notes = held.recovery.notes() if held.recovery is not None else []
    outcomes: list[tuple[int, Outcome]] = []

    async def one(entry: Entry, lease: Lease) -> None:
        retry = None
        try:
            lease = await _slot_port(session, slots, lease)
            plan = lease.plan(entry.plan)
            if dry_run:
                outcomes.append((entry.order, await dry_run_one(spec, plan, session, reporter)))
                return
            outcome = await run_one(spec, plan, session, store, reporter)
            if outcome.run_id is not None:  # the first run on the host tells what was cleaned up before it
                for note in notes:
                    store.event(store.get(str(outcome.run_id)), "recovered", note)
                notes.clear()
            if held.lock is not None and held.lock.lost:
                reporter.warning(session.host.name, f"{held.lock.path} was broken by another command during run {outcome.uid}")
            retry = await _lost_link(session, queue, entry, outcome, store, reporter)
            _record_retry(store, entry, outcome, session.host.name)
            if retry is None:
                outcomes.append((entry.order, outcome))
        except OrchError as exc:  # before the plan became a run (its render, its env): its outcome, its exit code
            outcomes.append((entry.order, Outcome(None, "-", entry.plan.variant, session.host.name, FAILED,
                                                  error=str(exc), evidence=exc.evidence, exit_code=exc.exit_code)))
        finally:
            await queue.done(slots, lease, retry)

    tasks: set[asyncio.Task[None]] = set()
    try:
        while (taken := await queue.take(session.host, slots)) is not None:
            tasks.add(asyncio.create_task(one(*taken)))
    except asyncio.CancelledError as exc:
        for task in tasks:
            task.cancel(*exc.args)  # the reason (a signal's name) goes with it
        if tasks:
            await asyncio.wait(tasks)
        raise
    if tasks:
        await asyncio.wait(tasks)  # done already, unless the host was lost with runs going
    for task in tasks:
        task.result()  # a bug in one run is raised, not dropped
    return outcomes


async def _slot_port(session: HostSession, slots: Slots, lease: Lease) -> Lease:
    """A slot past the first moves up from a port another process listens on (a few tries; the
    last taken one is refused by run_one's port check, with its holder named)."""
    for _ in range(SLOT_PORT_TRIES):
        if lease.index == 0 or lease.port is None or not (await occupancy.listener(session.conn, session.host,
                                                                                   lease.port)).listening:
            break
        lease = slots.moved(lease, lease.port + 1)
    return lease


async def _lost_link(session: HostSession, queue: Queue, entry: Entry, outcome: Outcome, store: Store,
                     reporter: Reporter) -> Entry | None:
    """After a failed run, is the link gone for good (the host does not answer a stat, reconnecting
    included)? Then the host takes no more plans, and the run goes back to the queue once: the retry."""
    if outcome.status != FAILED:
        return None
    name = session.host.name
    try:
        await session.conn.stat(session.host.workdir)
        return None  # the host answers: the error was the run's (a taken port, busy GPUs)
    except (OrchError, OSError) as exc:
        gone = HostError(f"{name}: the link failed for good ({exc}); its plans went to the other hosts")
    await queue.lose(name, gone)
    reporter.message(name, f"lost: {outcome.error}; its pending plans go to the other hosts")
    if entry.retry_of is not None or outcome.run_id is None:
        return None  # a retry is not retried again
    store.event(store.get(str(outcome.run_id)), "requeued",
                f"the link to {name} failed for good; the plan goes back to the queue for another host (once)")
    return Entry(entry.order, entry.plan, retry_of=outcome.run_id, lost_host=name)


def _record_retry(store: Store, entry: Entry, outcome: Outcome, host: str) -> None:
    """A retry and the run it retries name each other."""
    if entry.retry_of is None or outcome.run_id is None:
        return
    first, retry = store.get(str(entry.retry_of)), store.get(str(outcome.run_id))
    store.event(retry, "retry", f"retry of run {first.id} ({first.uid}), cut short when the link to "
                f"{entry.lost_host} failed")
    store.event(first, "retried", f"retried as run {retry.id} ({retry.uid}) on {host}")


def controller() -> str:
    """This process as runs record it (`Run.controller`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _current_run(store: Store, host: str) -> str:
    running = store_queries.running_runs(store, host, controller())
    return running[-1].uid if running else ""


def run_context(spec: Spec, plan: RunPlan, host: Host, uid: str) -> dict[str, Any]:
    run_dir = f"{host.workdir}/runs/{uid}"
    base = {
        "host": host.context(),
        "run": {"uid": uid, "dir": run_dir, "log": f"{run_dir}/{server.LOG_NAME}"},
        "experiment": spec.name,
        "variant": plan.variant,
    }
    base["checkpoints"] = {c.name: render.render_value(c.dest, base, f"{c.where}: checkpoint dest") for c in spec.checkpoints}
    params = {k: render.render_value(v, {**base, "params": plan.params}, f"{spec.path}: param {k}") for k, v in plan.params.items()}
    env = {**host.env, **{k: specs.resolve_controller_vars(v, f"{spec.path}: env {k}") for k, v in plan.env.items()}}
    if overlay.PARAM in params:  # an isolated run imports its own patched copy first (`host/overlay.py`)
        env["PYTHONPATH"] = ":".join(p for p in (params[overlay.PARAM], env.get("PYTHONPATH")) if p)
    return {**params, **base, "params": params, "env": env, "secret_names": (*spec.secrets, *host.secrets)}


async def prepare_patches(session: HostSession, plan: RunPlan) -> list[tuple[PatchDef, str, bytes, bytes]]:
    """Every patch checked against the host's files before any file changes; patches to the
    same file apply on top of each other, in order. A patch set another run on the host has applied
    now is that run's, prepared against the original files (`sharing.py`). An isolated run's
    patches apply to the original text too, whatever set is applied in place now (`sharing.originals`)."""
    isolated = overlay.PARAM in plan.params
    shared = None if isolated else await sharing.prepared_for(session.journal, plan.patches)
    if shared is not None:
        return shared
    current: dict[str, bytes] = await sharing.originals(session) if isolated else {}
    prepared = []
    for patch in plan.patches:
        file = await session.resolve(patch)
        before, after = await session.journal.prepare(patch, file, current.get(file))
        current[file] = after
        prepared.append((patch, file, before, after))
    return prepared


async def dry_run_one(spec: Spec, plan: RunPlan, session: HostSession, reporter: Reporter) -> Outcome:
    """Render and check everything, change nothing: the script, the flag check and the preflight
    (both only read the host), and each patch as a diff. An error is the outcome (exit 2), as in a run."""
    uid = "dry-run"
    label = f"{plan.variant}@{session.host.name}"
    context = run_context(spec, plan, session.host, uid)
    script = render.launch_script(spec.template, context)
    reporter.message(label, "launch script:\n" + redact(script, context["env"], context["secret_names"]))
    try:
        await engines.get(spec.engine).check_launch(session, script, spec.template, reporter.message, label)
        await _dry_preflight(spec, plan, session, reporter, context, label)
        prepared = await prepare_patches(session, plan)
        for patch, file, before, after in prepared:
            diff = patching.unified(before.decode(), after.decode(), file.lstrip("/"))
            reporter.message(label, f"patch '{patch.name}' -> {file}:\n{diff}")
        await patchcheck.ensure_compiles(session.conn, session.host, prepared)
    except OrchError as exc:
        return Outcome(None, uid, plan.variant, session.host.name, FAILED, error=str(exc), exit_code=exc.exit_code)
    return Outcome(None, uid, plan.variant, session.host.name, SUCCEEDED)


async def _dry_preflight(spec: Spec, plan: RunPlan, session: HostSession, reporter: Reporter,
                         context: dict[str, Any], label: str) -> None:
    """The run's preflight without its record: findings reported, errors raised."""
    if not spec.preflight:
        reporter.message(label, "preflight skipped (--no-preflight)")
        return
    # the checkpoints are not pushed: read from their local (transformed) copies, as `orch check` does
    overlay = await stages.local_checkpoints(spec, context)
    found = await engines.get(spec.engine).preflight(session, context["params"], context["env"], plan.patches,
                                                     overlay, plan.allow)
    for f in found:
        reporter.message(label, preflight.described(f))
    preflight.stop_on_errors(found, plan.allow, label)


def _attempt(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter) -> Attempt:
    """The run's row recorded as started, and what its stages read."""
    host = session.host
    uid = new_uid(plan.variant)
    context = run_context(spec, plan, host, uid)
    env = context["env"]
    hidden = secret_values(env, context["secret_names"])
    store.keep_secret(hidden)  # every row this run writes, errors and debug lines included
    script = render.launch_script(spec.template, context)
    run = Run(
        uid=uid, experiment=spec.name, variant=plan.variant, host=host.name, repeat=plan.repeat,
        spec_path=str(spec.path), spec=spec.raw, params=context["params"],
        env=mask_env(env, context["secret_names"]), command=hide(script, hidden), controller=controller(),
        plan_key=plan.key, fingerprint=plan.fingerprint or None,  # what --resume matches (plankey)
    )
    store.add(run)
    return Attempt(spec, plan, engines.get(spec.engine), session, store, run, hiding(reporter, hidden), context,
                   f"{plan.variant}@{host.name} #{run.id}", script, hidden)  # the id: runs share hosts


async def run_one(spec: Spec, plan: RunPlan, session: HostSession, store: Store, reporter: Reporter) -> Outcome:
    attempt = _attempt(spec, plan, session, store, reporter)
    host, engine, run, context, env = session.host, attempt.engine, attempt.run, attempt.context, attempt.context["env"]
    attempt.known(run=run.id, gpus=attempt.gpus, engine=spec.engine)  # the live table's row for this run
    attempt.say(f"run {run.id} ({run.uid}) started")
    srv: server.Server | None = None
    log = b""
    status, error, evidence, exit_code = FAILED, None, (), 1
    metrics: dict[str, Any] = {}
    flags: list[str] = []
    measured: tuple[WorkloadResult, ServerState, ServerState] | None = None
    diagnosis = None
    links_from, workload_from = len(reconnections(session.conn)), None  # earlier runs' reopened links are theirs
    try:
        attempt.enter(Stage.CHECK_FLAGS)
        await engine.check_launch(session, attempt.script, spec.template, attempt.says, attempt.label)
        attempt.enter(Stage.CHECK_HOST)
        port = int(context["params"].get("port", 30000))
        busy = await occupancy.ensure_free(session.conn, host, port, int(context["params"].get("tp_size", 1) or 1),
                                           env.get("CUDA_VISIBLE_DEVICES"), spec.allow_busy_gpus)
        for problem in busy:
            store.event(run, "busy-gpus-allowed", f"orch run --allow-busy-gpus: {problem}")
            attempt.warn(f"{problem} (--allow-busy-gpus)")
        attempt.enter(Stage.PUSH)
        await stages.push_checkpoints(attempt)
        attempt.enter(Stage.PREFLIGHT)
        await preflight.gate(attempt)
        attempt.enter(Stage.PREPARE_PATCHES)
        prepared = await prepare_patches(session, plan)
        await patchcheck.ensure_compiles(session.conn, host, prepared)
        attempt.enter(Stage.APPLY_PATCHES)
        await _uncancelled(stages.apply_patches(attempt, prepared))  # whole: the revert then undoes each
        attempt.enter(Stage.LAUNCH)
        started = time.monotonic()
        srv = await server.launch(session.conn, context["run"]["dir"], attempt.script, port, attempt.secrets)
        store.event(run, "launched", f"pid {srv.pgid} in {srv.run_dir}")
        attempt.say(f"server launched (pid {srv.pgid}); waiting for it to be ready")
        attempt.enter(Stage.WAIT_READY)
        log = await server.wait_ready(session.conn, srv, spec.ready_timeout, engine)
        metrics["startup_s"] = time.monotonic() - started
        attempt.say(f"ready after {metrics['startup_s']:.1f} s; sending {spec.workload.requests} requests")
        attempt.enter(Stage.WORKLOAD)
        address = await session.conn.forward(port)
        base_url = f"http://{address[0]}:{address[1]}"
        workload_from = len(reconnections(session.conn))  # a link reopened from now on cut the requests in flight
        before = await engine.server_state(base_url)
        result = await workload.run(engine, base_url, spec.workload, workload.so_far(engine, attempt.known))
        measured = (result, before, await engine.server_state(base_url))
        workload_from = None  # the workload is done: a later drop cuts none of its requests
        metrics.update(collect.workload_metrics(result))
        status, exit_code = SUCCEEDED, 0  # unless the measures fail an expectation (after the stop)
    except OrchError as exc:
        error, evidence, exit_code = str(exc), exc.evidence, exc.exit_code
        diagnosis = exc.diagnosis if isinstance(exc, ServerError) else None
        if diagnosis is not None:
            store.update_run(run, diagnosis=diagnosis.as_record())
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        # a signal to `orch run` cancels its runs (cli/interrupt.py); the cancel names the signal
        status, error, exit_code = INTERRUPTED, _interrupted_because(exc), EXIT_INTERRUPTED
        raise
    finally:
        async def clean_up() -> None:
            nonlocal run, log, status, error, exit_code, srv
            attempt.reporter = _unfailing(attempt.reporter)  # a closed terminal or pipe loses lines, not the cleanup
            if srv is None and attempt.stage in _LAUNCHING:  # cancelled while the launch command ran
                srv = await _launched(session, context["run"]["dir"], int(context["params"].get("port", 30000)))
            cleanup_errors: list[BaseException] = []
            try:
                attempt.enter(Stage.STOP)
                log = await stages.stop(attempt, srv) or log
            except (OrchError, OSError) as exc:  # the log read while waiting for readiness is what there is
                cleanup_errors.append(exc)
            attempt.enter(Stage.READ_LOG)
            log_report = engine.parse_log(log, spec.debug_pattern, _patched_files(store, run))  # the one reading
            attempt.enter(Stage.RECORD)
            if srv is not None:
                collect.store_log(store, run, log, log_report)
            if measured is not None:
                found, notes = collect.record(store, run, metrics, engine.measures(*measured, log_report))
                attempt.known(**metrics)  # accept length, tokens/s
                flags.extend(found)
                for note in notes:
                    attempt.say(note)
                failed_expectations = collect.check_expectations(plan, metrics)
                if failed_expectations:
                    status, exit_code = FAILED, 1
                    error = "expectation failed: " + "; ".join(failed_expectations)
            if status == FAILED and log_report.diagnosis is not None and (diagnosis is None or log_report.diagnosis.decisive):
                # the whole log, read knowing the patched files, names the cause: it replaces the one made when the server died
                store.update_run(run, diagnosis=log_report.diagnosis.as_record())
            try:
                attempt.enter(Stage.REVERT)
                drifted = await stages.revert_patches(attempt)  # even when the stop failed
                if cleanup_errors:
                    raise cleanup_errors[0]
                if drifted:  # the promise is an unmodified install: a file left changed fails the run
                    flags.append("patch-drifted")
                    error = (f"{error}; " if error else "") + f"{len(drifted)} patched file(s) changed during the run " \
                        f"and were left as they are: {', '.join(drifted)}; see `orch patches`"
                    status, exit_code = (FAILED, 1) if status == SUCCEEDED else (status, exit_code)
            except (OrchError, OSError) as exc:
                error = (f"{error}; " if error else "") + f"cleanup failed: {exc}"
                status = FAILED if status == SUCCEEDED else status
                store.event(run, "cleanup-failed", str(exc))
            cut = collect.record_reconnections(store, run, host.name, reconnections(session.conn), links_from, workload_from)
            if cut and status == FAILED:
                error = (f"{error}; " if error else "") + cut
            run = store.update_run(run, status=status, error=error, flags=flags, ended_at=now())
            attempt.known(status=status)
            attempt.say(f"run {run.id} {status}" + (f": {error}" if error else ""))

        await _uncancelled(clean_up())  # a second signal never cuts a stop or a revert short
    hidden = attempt.secrets
    error, evidence = (hide(error, hidden) if error else error), tuple(hide(e, hidden) for e in evidence)
    return Outcome(run.id, run.uid, plan.variant, host.name, status, metrics, tuple(flags), error, evidence, exit_code)


def _patched_files(store: Store, run: Run) -> list[str]:
    """The files the run's patches touched, as written and as resolved: a diagnosis names them."""
    return [path for patch in store.children(run, PatchRow) for path in (patch.file, patch.target)]


_LAUNCHING = (Stage.LAUNCH, Stage.WAIT_READY)
LAUNCH_PID_WAIT_S = 5.0  # the launch command waits as long for the wrapper's pid file


def _interrupted_because(exc: BaseException) -> str:
    """The reason a cancelled run records: the signal `orch run` got, when the cancel names it."""
    said = str(exc.args[0]) if exc.args and exc.args[0] else ""
    return said or "interrupted by the user"


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


class _Unfailing:
    """A reporter whose lines may be lost but never stop a cleanup: `orch run | tee` after Ctrl-C
    writes to a closed pipe (which rich's console turns into SystemExit), a hung-up terminal answers EIO."""

    def __init__(self, reporter: Reporter):
        self._reporter = reporter

    def __getattr__(self, name: str) -> Any:
        hook = getattr(self._reporter, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return hook(*args, **kwargs)
            except (OSError, SystemExit):  # rich turns a broken pipe into SystemExit, once quiet
                return None
        return call


def _unfailing(reporter: Reporter) -> Reporter:
    return cast(Reporter, _Unfailing(reporter))


async def _uncancelled(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end even when this task is cancelled meanwhile (a second signal, a sibling's
    failure): a stop or a revert cut short would leave a server up or a file half restored. The
    cancellation is raised again once the work is done."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError as exc:
            if task.done():
                raise
            cancelled = cancelled or exc  # the first names the signal
    if cancelled is not None:
        raise cancelled
