"""The one place that sequences the stages of a run. Cleanup (stop, revert) runs in `finally`.

    per host:  connect -> lock -> recover leftovers -> install rehearsal
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.host import checkpoint, occupancy, patchcheck, rehearsal, server
from . import collect, preflight, workload
from orchestrator.core import patching, render, spec as specs
from orchestrator import engines
from orchestrator.engines.base import Engine, ServerState, WorkloadResult
from orchestrator.store import database as store_queries
from orchestrator.errors import EXIT_INTERRUPTED, HostError, OrchError, ServerError, SpecError
from orchestrator.core.inventory import Host
from orchestrator.host.journal import APPLIED, DRIFTED
from orchestrator.host.lock import HostLock
from orchestrator.host.recovery import recover
from orchestrator.remote.reconnecting import reconnections
from orchestrator.core.secrets import hide, mask_env, redact, secret_values
from orchestrator.host.session import HostSession
from orchestrator.core.spec import PatchDef, RunPlan, Spec
from orchestrator.core.clock import new_uid, now
from orchestrator.store.database import FAILED, INTERRUPTED, SUCCEEDED, DebugRow, PatchRow, Run, Store

Report = Callable[[str, str], None]


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
    """Each plan goes to the least-loaded host with enough GPUs for its tensor-parallel size."""
    queues: dict[str, list[RunPlan]] = {h.name: [] for h in hosts}
    for plan in plans:
        tp = int(plan.params.get("tp_size", 1) or 1)
        able = [h for h in hosts if h.gpus >= tp or h.gpus == 0 and h.transport == "local" and not h.rehearsal]
        if not able:
            have = ", ".join(f"{h.name} ({h.gpus} GPUs)" for h in hosts)
            raise SpecError(f"variant '{plan.variant}' needs tp_size={tp} GPUs; no chosen host has that many: {have}")
        target = min(able, key=lambda h: len(queues[h.name]))
        queues[target.name].append(plan)
    return {name: queue for name, queue in queues.items() if queue}


async def run_all(
    spec: Spec, plans: list[RunPlan], hosts: list[Host], store: Store, report: Report, *, dry_run: bool = False
) -> list[Outcome]:
    """Hosts in parallel, one run per host at a time."""
    queues = schedule(plans, hosts)
    by_name = {h.name: h for h in hosts}
    results = await asyncio.gather(
        *(_host_worker(spec, queue, by_name[name], store, report, dry_run) for name, queue in queues.items()),
        return_exceptions=True,
    )
    outcomes: list[Outcome] = []
    for name, result in zip(queues, results):
        if isinstance(result, BaseException):
            if isinstance(result, (KeyboardInterrupt, asyncio.CancelledError)):
                raise result
            if not isinstance(result, OrchError):
                raise result
            for plan in queues[name]:
                outcomes.append(Outcome(None, "-", plan.variant, name, FAILED, error=str(result), exit_code=result.exit_code))
        else:
            outcomes.extend(result)
    return outcomes


async def _host_worker(
    spec: Spec, queue: list[RunPlan], host: Host, store: Store, report: Report, dry_run: bool
) -> list[Outcome]:
    try:
        session = await HostSession.open(host)
    except OSError as exc:
        raise HostError(f"{host.name}: cannot connect: {exc}") from None
    lock: HostLock | None = None
    try:
        notes: list[str] = []
        if not dry_run:  # a dry run changes nothing, so it needs no lock
            taking = HostLock(session.conn, session.host.workdir, "run")
            try:
                broken = await taking.acquire()
            except HostError as exc:
                report(host.name, f"refused: {exc}")  # whole, before the summary table wraps it
                raise
            lock = taking
            recovery = await recover(session, store, report, broken=broken)
            lock.keep_alive(lambda: _current_run(store, host.name))
            notes = recovery.notes()
        if host.rehearsal:
            report(host.name, "installing the rehearsal SGLang")
            await rehearsal.install(session.conn, session.host)
        outcomes = []
        for plan in queue:
            if dry_run:
                outcomes.append(await dry_run_one(spec, plan, session, report))
            else:
                outcome = await run_one(spec, plan, session, store, report)
                if outcome.run_id is not None:  # the first run on the host tells what was cleaned up before it
                    for note in notes:
                        store.event(store.get(str(outcome.run_id)), "recovered", note)
                    notes = []
                if lock is not None and lock.lost:
                    report(host.name, f"warning: {lock.path} was broken by another command during run {outcome.uid}")
                outcomes.append(outcome)
        return outcomes
    finally:
        if lock is not None:
            await _release(lock, report)
        await session.conn.close()


async def _release(lock: HostLock, report: Report) -> None:
    try:
        await lock.release()
    except (OrchError, OSError) as exc:  # the host went away: the lease runs out on its own
        report(lock.conn.host.name, f"warning: could not remove {lock.path} ({exc}); it expires with its lease")


def _controller() -> str:
    """This process as runs record it (`Run.controller`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _current_run(store: Store, host: str) -> str:
    running = store_queries.running_runs(store, host, _controller())
    return running[-1].uid if running else ""


def _hiding(report: Report, secrets: dict[str, str]) -> Report:
    """`report` with the run's secret values hidden from everything it prints."""
    if not secrets:
        return report
    return lambda label, message: report(label, hide(message, secrets))


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
    return {**params, **base, "params": params, "env": env, "secret_names": (*spec.secrets, *host.secrets)}


async def prepare_patches(session: HostSession, plan: RunPlan) -> list[tuple[PatchDef, str, bytes, bytes]]:
    """Every patch checked against the host's files before any file changes; patches to the
    same file apply on top of each other, in order."""
    current: dict[str, bytes] = {}
    prepared = []
    for patch in plan.patches:
        file = await session.resolve(patch)
        before, after = await session.journal.prepare(patch, file, current.get(file))
        current[file] = after
        prepared.append((patch, file, before, after))
    return prepared


async def dry_run_one(spec: Spec, plan: RunPlan, session: HostSession, report: Report) -> Outcome:
    """Render and check everything, change nothing: the script, the flag check and the preflight
    (both only read the host), and each patch as a diff. An error is the outcome (exit 2), as in a run."""
    uid = "dry-run"
    label = f"{plan.variant}@{session.host.name}"
    context = run_context(spec, plan, session.host, uid)
    script = render.launch_script(spec.template, context)
    report(label, "launch script:\n" + redact(script, context["env"], context["secret_names"]))
    try:
        await engines.get(spec.engine).check_launch(session, script, spec.template, report, label)
        await _dry_preflight(spec, plan, session, report, context, label)
        prepared = await prepare_patches(session, plan)
        for patch, file, before, after in prepared:
            diff = patching.unified(before.decode(), after.decode(), file.lstrip("/"))
            report(label, f"patch '{patch.name}' -> {file}:\n{diff}")
        await patchcheck.ensure_compiles(session.conn, session.host, prepared)
    except OrchError as exc:
        return Outcome(None, uid, plan.variant, session.host.name, FAILED, error=str(exc), exit_code=exc.exit_code)
    return Outcome(None, uid, plan.variant, session.host.name, SUCCEEDED)


async def _dry_preflight(spec: Spec, plan: RunPlan, session: HostSession, report: Report, context: dict[str, Any],
                         label: str) -> None:
    """The run's preflight without its record: findings reported, errors raised."""
    if not spec.preflight:
        report(label, "preflight skipped (--no-preflight)")
        return
    # the checkpoints are not pushed: read from their local (transformed) copies, as `orch check` does
    overlay = {context["checkpoints"][c.name]: (await asyncio.to_thread(checkpoint.prepare, c)).folder
               for c in spec.checkpoints}
    found = await engines.get(spec.engine).preflight(session, context["params"], context["env"], plan.patches,
                                                     overlay, plan.allow)
    for f in found:
        report(label, preflight.described(f))
    preflight.stop_on_errors(found, plan.allow, label)


async def run_one(spec: Spec, plan: RunPlan, session: HostSession, store: Store, report: Report) -> Outcome:
    host = session.host
    engine = engines.get(spec.engine)
    uid = new_uid(plan.variant)
    label = f"{plan.variant}@{host.name}"
    context = run_context(spec, plan, host, uid)
    env = context["env"]
    hidden = secret_values(env, context["secret_names"])
    store.keep_secret(hidden)  # every row this run writes, errors and debug lines included
    report = _hiding(report, hidden)
    script = render.launch_script(spec.template, context)
    run = Run(
        uid=uid, experiment=spec.name, variant=plan.variant, host=host.name, repeat=plan.repeat,
        spec_path=str(spec.path), spec=spec.raw, params=context["params"],
        env=mask_env(env, context["secret_names"]), command=hide(script, hidden), controller=_controller(),
        plan_key=plan.key, fingerprint=plan.fingerprint or None,  # what --resume matches (plankey)
    )
    store.add(run)
    report(label, f"run {run.id} ({uid}) started")
    srv: server.Server | None = None
    log = b""
    status, error, evidence, exit_code = FAILED, None, (), 1
    metrics: dict[str, Any] = {}
    flags: list[str] = []
    measured: tuple[WorkloadResult, ServerState, ServerState] | None = None
    diagnosis = None
    links_from, workload_from = len(reconnections(session.conn)), None  # earlier runs' reopened links are theirs
    try:
        await engine.check_launch(session, script, spec.template, report, label)
        port = int(context["params"].get("port", 30000))
        busy = await occupancy.ensure_free(session.conn, host, port, int(context["params"].get("tp_size", 1) or 1),
                                           env.get("CUDA_VISIBLE_DEVICES"), spec.allow_busy_gpus)
        for problem in busy:
            store.event(run, "busy-gpus-allowed", f"orch run --allow-busy-gpus: {problem}")
            report(label, f"warning: {problem} (--allow-busy-gpus)")
        await checkpoint.push_stage(spec, plan, session, store, run, report, context)
        await preflight.gate(engine, spec, plan, session, store, run, report, context)
        prepared = await prepare_patches(session, plan)
        await patchcheck.ensure_compiles(session.conn, host, prepared)
        for seq, (patch, file, before, after) in enumerate(prepared, 1):
            record = await session.journal.apply(uid, seq, patch, file, before, after)
            store.add(PatchRow(run_id=run.id, seq=seq, name=patch.name, target=patch.file, file=file,
                               sha256_before=record.sha256_before, sha256_after=record.sha256_after, state=APPLIED))
            report(label, f"patched {file} ({patch.name})")
        started = time.monotonic()
        srv = await server.launch(session.conn, context["run"]["dir"], script, port, hidden)
        store.event(run, "launched", f"pid {srv.pgid} in {srv.run_dir}")
        report(label, f"server launched (pid {srv.pgid}); waiting for it to be ready")
        log = await server.wait_ready(session.conn, srv, spec.ready_timeout, engine)
        metrics["startup_s"] = time.monotonic() - started
        report(label, f"ready after {metrics['startup_s']:.1f} s; sending {spec.workload.requests} requests")
        address = await session.conn.forward(port)
        base_url = f"http://{address[0]}:{address[1]}"
        workload_from = len(reconnections(session.conn))  # a link reopened from now on cut the requests in flight
        before = await engine.server_state(base_url)
        result = await workload.run(engine, base_url, spec.workload)
        measured = (result, before, await engine.server_state(base_url))
        workload_from = None  # the workload is done: a later drop cuts none of its requests
        metrics.update(collect.workload_metrics(result))
        status, exit_code = SUCCEEDED, 0  # unless the measures fail an expectation (after the stop)
    except OrchError as exc:
        error, evidence, exit_code = str(exc), exc.evidence, exc.exit_code
        diagnosis = exc.diagnosis if isinstance(exc, ServerError) else None
        if diagnosis is not None:
            store.update_run(run, diagnosis=diagnosis.as_record())
    except (KeyboardInterrupt, asyncio.CancelledError):
        status, error, exit_code = INTERRUPTED, "interrupted by the user", EXIT_INTERRUPTED
        raise
    finally:
        cleanup_errors: list[BaseException] = []
        try:
            log = await _stop(session, store, run, srv, engine, spec.debug_pattern, report, label) or log
        except (OrchError, OSError) as exc:  # the log read while waiting for readiness is what there is
            cleanup_errors.append(exc)
        log_report = engine.parse_log(log, spec.debug_pattern, _patched_files(store, run))  # the one reading
        if srv is not None:
            collect.store_log(store, run, log, log_report)
        if measured is not None:
            found, notes = collect.record(store, run, metrics, engine.measures(*measured, log_report))
            flags.extend(found)
            for note in notes:
                report(label, note)
            failed_expectations = collect.check_expectations(plan, metrics)
            if failed_expectations:
                status, exit_code = FAILED, 1
                error = "expectation failed: " + "; ".join(failed_expectations)
        if status == FAILED and log_report.diagnosis is not None and (diagnosis is None or log_report.diagnosis.decisive):
            # the whole log, read knowing the patched files, names the cause: it replaces the one made when the server died
            store.update_run(run, diagnosis=log_report.diagnosis.as_record())
        try:
            drifted = await _revert(session, store, run, report, label)  # even when the stop failed
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
        report(label, f"run {run.id} {status}" + (f": {error}" if error else ""))
    error, evidence = (hide(error, hidden) if error else error), tuple(hide(e, hidden) for e in evidence)
    return Outcome(run.id, uid, plan.variant, host.name, status, metrics, tuple(flags), error, evidence, exit_code)


def _patched_files(store: Store, run: Run) -> list[str]:
    """The files the run's patches touched, as written and as resolved: a diagnosis names them."""
    return [path for patch in store.children(run, PatchRow) for path in (patch.file, patch.target)]


async def _stop(session: HostSession, store: Store, run: Run, srv: server.Server | None, engine: Engine,
                debug_pattern: str, report: Report, label: str) -> bytes:
    """Stop the server, whatever happened before; returns its whole log (empty without a server)."""
    if srv is None:
        return b""
    stopped = await server.stop(session.conn, srv)
    store.event(run, "stopped", stopped.summary(server.STOP_GRACE_SECONDS))
    if stopped.killed or stopped.strays or not stopped.gone:
        report(label, ("" if stopped.gone else "warning: ") + f"server {stopped.summary(server.STOP_GRACE_SECONDS)}")
    return await server.read_log(session.conn, srv, engine, debug_pattern)


async def _revert(session: HostSession, store: Store, run: Run, report: Report, label: str) -> list[str]:
    """Revert this run's patches. Returns the files that changed under us and were left alone (drifted)."""
    reverted = await session.journal.revert(run.uid)
    if reverted:
        store.set_patch_states(run, {r.seq: r.state for r in reverted})
        drifted = [r for r in reverted if r.state == DRIFTED]
        for r in drifted:
            message = (f"{session.host.name}:{r.file} changed during the run; left as it is. Original saved at "
                       f"{r.backup}; `orch revert --host {session.host.name} --force` restores it")
            store.event(run, "drifted", message)
            report(label, message)
        report(label, f"reverted {len(reverted) - len(drifted)} patch(es)")
        return [f"{session.host.name}:{r.file}" for r in drifted]
    return []
