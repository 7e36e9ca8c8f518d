"""The one place that sequences the stages of a run. Cleanup (stop, revert) runs in `finally`.

    connect -> recover leftovers -> install rehearsal -> prepare patches (all anchors checked)
    -> apply patches (journal first) -> render + launch -> wait ready -> workload -> collect
    -> stop -> revert patches -> record
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import secrets as random_ids
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import rehearsal, render, server, shell, spec as specs, workload
from .engines.sglang import logs
from .errors import EXIT_INTERRUPTED, HostError, OrchError, PatchError, SpecError
from .inventory import Host
from .journal import APPLIED, DRIFTED, Journal, PatchRecord
from .remote import Connection, connect
from .secrets import mask_env, redact, redact_bytes
from .spec import PatchDef, RunPlan, Spec
from .store import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, DebugRow, MetricRow, PatchRow, Run, SeriesRow, Store, now

Report = Callable[[str, str], None]
REJECTED_AT_OR_BELOW = 1.05
DISAGREEMENT = 0.05


@dataclass(frozen=True)
class Outcome:
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


@dataclass
class HostSession:
    """A host's open connection and what we learned about it during this command."""

    host: Host
    conn: Connection
    journal: Journal
    packages: dict[str, str] = field(default_factory=dict)

    @classmethod
    async def open(cls, host: Host) -> "HostSession":
        conn = await connect(host)
        workdir = absolute(host.workdir, conn.home)
        host = dataclasses.replace(host, workdir=workdir)
        conn.host = host
        return cls(host, conn, Journal(conn, workdir))

    async def resolve(self, patch: PatchDef) -> str:
        """`PACKAGE:relative/path` -> the file under that package's folder on the host, found
        without importing the package (SGLang's __init__ imports torch)."""
        package, sep, relative = patch.file.partition(":")
        if not sep or patch.file.startswith("/"):
            return patch.file
        if package not in self.packages:
            done = await self.conn.run(shell.package_dir(self.host.python, package, self.host.rehearsal_dir))
            folder = done.out.strip()
            if not done.ok or not folder:
                raise PatchError(
                    f"{patch.where}: patch '{patch.name}': package '{package}' is not installed for "
                    f"{self.host.python} on {self.host.name}; set the host's `python:` or use an absolute path"
                )
            self.packages[package] = folder
        return f"{self.packages[package]}/{relative}"


def absolute(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def new_uid(plan: RunPlan) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    variant = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.variant)[:40]
    return f"{stamp}-{variant}-{random_ids.token_hex(3)}"


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
    try:
        if not dry_run:
            await recover(session, store, report)
        if host.rehearsal:
            report(host.name, "installing the rehearsal SGLang")
            await rehearsal.install(session.conn, session.host)
        outcomes = []
        for plan in queue:
            if dry_run:
                outcomes.append(await dry_run_one(spec, plan, session, report))
            else:
                outcomes.append(await run_one(spec, plan, session, store, report))
        return outcomes
    finally:
        await session.conn.close()


async def recover(session: HostSession, store: Store, report: Report, *, force: bool = False) -> list[PatchRecord]:
    """Revert patches an earlier run left applied (a crashed or killed controller)."""
    leftovers = await session.journal.records()
    if not leftovers:
        return []
    runs = sorted({r.run for r in leftovers})
    report(session.host.name, f"reverting {len(leftovers)} patch(es) left applied by run(s) {', '.join(runs)}")
    reverted = await session.journal.revert(force=force)
    for uid in runs:
        states = {r.seq: r.state for r in reverted if r.run == uid}
        try:
            old = store.get(uid)
        except OrchError:
            continue
        store.set_patch_states(old, states)
        store.event(old, "recovered", f"patches reverted by a later command on {session.host.name}: {states}")
        if old.status == RUNNING:
            store.update_run(old, status=INTERRUPTED, ended_at=now(),
                             error="the controller stopped before the run ended; its patches were reverted later")
    return reverted


def _context(spec: Spec, plan: RunPlan, host: Host, uid: str) -> dict[str, Any]:
    run_dir = f"{host.workdir}/runs/{uid}"
    base = {
        "host": host.context(),
        "run": {"uid": uid, "dir": run_dir, "log": f"{run_dir}/{server.LOG_NAME}"},
        "experiment": spec.name,
        "variant": plan.variant,
    }
    params = {k: render.render_value(v, {**base, "params": plan.params}, f"{spec.path}: param {k}") for k, v in plan.params.items()}
    env = {**host.env, **{k: specs.resolve_controller_vars(v, f"{spec.path}: env {k}") for k, v in plan.env.items()}}
    return {**params, **base, "params": params, "env": env}


async def _prepare_patches(session: HostSession, plan: RunPlan) -> list[tuple[PatchDef, str, bytes, bytes]]:
    """Every patch checked against the host's files before any file changes; patches to the
    same file apply on top of each other, in order."""
    current: dict[str, bytes] = {}
    prepared = []
    for patch in plan.patches:
        file = await session.resolve(patch)
        if file in current:
            before = current[file]
            after = (await asyncio.to_thread(_apply_text, patch, before, f"{session.host.name}:{file}"))
        else:
            before, after = await session.journal.prepare(patch, file)
        current[file] = after
        prepared.append((patch, file, before, after))
    return prepared


def _apply_text(patch: PatchDef, before: bytes, where: str) -> bytes:
    from . import patching

    return patching.apply(patch, before.decode(), where).encode()


async def dry_run_one(spec: Spec, plan: RunPlan, session: HostSession, report: Report) -> Outcome:
    """Render and check everything, change nothing: the script and each patch as a diff."""
    from . import patching

    uid = "dry-run"
    context = _context(spec, plan, session.host, uid)
    script = render.render_file(spec.template, context)
    report(f"{plan.variant}@{session.host.name}", "launch script:\n" + redact(script, context["env"]))
    for patch, file, before, after in await _prepare_patches(session, plan):
        diff = patching.unified(before.decode(), after.decode(), file.lstrip("/"))
        report(f"{plan.variant}@{session.host.name}", f"patch '{patch.name}' -> {file}:\n{diff}")
    return Outcome(None, uid, plan.variant, session.host.name, SUCCEEDED)


async def run_one(spec: Spec, plan: RunPlan, session: HostSession, store: Store, report: Report) -> Outcome:
    host = session.host
    uid = new_uid(plan)
    label = f"{plan.variant}@{host.name}"
    context = _context(spec, plan, host, uid)
    env = context["env"]
    script = render.render_file(spec.template, context)
    run = Run(
        uid=uid, experiment=spec.name, variant=plan.variant, host=host.name, repeat=plan.repeat,
        spec_path=str(spec.path), spec=spec.raw, params=context["params"], env=mask_env(env),
        command=redact(script, env), controller=f"{socket.gethostname()}:{os.getpid()}",
    )
    store.add(run)
    report(label, f"run {run.id} ({uid}) started")
    applied: list[PatchRecord] = []
    srv: server.Server | None = None
    log = b""
    status, error, evidence, exit_code = FAILED, None, (), 1
    metrics: dict[str, Any] = {}
    flags: list[str] = []
    try:
        prepared = await _prepare_patches(session, plan)
        for seq, (patch, file, before, after) in enumerate(prepared, 1):
            record = await session.journal.apply(uid, seq, patch, file, before, after)
            applied.append(record)
            store.add(PatchRow(run_id=run.id, seq=seq, name=patch.name, target=patch.file, file=file,
                               sha256_before=record.sha256_before, sha256_after=record.sha256_after, state=APPLIED))
            report(label, f"patched {file} ({patch.name})")
        port = int(context["params"].get("port", 30000))
        started = time.monotonic()
        srv = await server.launch(session.conn, context["run"]["dir"], script, port)
        store.event(run, "launched", f"pid {srv.pgid} in {srv.run_dir}")
        report(label, f"server launched (pid {srv.pgid}); waiting for it to be ready")
        log = await server.wait_ready(session.conn, srv, spec.ready_timeout)
        metrics["startup_s"] = time.monotonic() - started
        report(label, f"ready after {metrics['startup_s']:.1f} s; sending {spec.workload.requests} requests")
        address = await session.conn.forward(port)
        base_url = f"http://{address[0]}:{address[1]}"
        result = await workload.run(base_url, spec.workload)
        info, endpoint = await workload.server_info(base_url)
        metrics.update(_workload_metrics(result))
        log = await server.read_log(session.conn, srv)
        flags, notes = _record_metrics(store, run, metrics, result, info, endpoint, log, spec, plan, context)
        for note in notes:
            report(label, note)
        failed_expectations = _check_expectations(plan, metrics)
        if failed_expectations:
            error = "expectation failed: " + "; ".join(failed_expectations)
        else:
            status, exit_code = SUCCEEDED, 0
    except OrchError as exc:
        error, evidence, exit_code = str(exc), exc.evidence, exc.exit_code
        diagnosis = getattr(exc, "diagnosis", None)
        if diagnosis is not None:
            store.update_run(run, diagnosis={"kind": diagnosis.kind, "summary": diagnosis.summary,
                                             "evidence": list(diagnosis.evidence)})
    except (KeyboardInterrupt, asyncio.CancelledError):
        status, error, exit_code = INTERRUPTED, "interrupted by the user", EXIT_INTERRUPTED
        raise
    finally:
        try:
            await _cleanup(session, store, run, srv, applied, log, env, spec, report, label)
        except (OrchError, OSError) as exc:
            error = (f"{error}; " if error else "") + f"cleanup failed: {exc}"
            status = FAILED if status == SUCCEEDED else status
            store.event(run, "cleanup-failed", str(exc))
        run = store.update_run(run, status=status, error=error, flags=flags, ended_at=now())
        report(label, f"run {run.id} {status}" + (f": {error}" if error else ""))
    return Outcome(run.id, uid, plan.variant, host.name, status, metrics, tuple(flags), error, evidence, exit_code)


async def _cleanup(session: HostSession, store: Store, run: Run, srv: server.Server | None,
                   applied: list[PatchRecord], log: bytes, env: dict[str, str], spec: Spec,
                   report: Report, label: str) -> None:
    """Stop the server, keep its log, revert this run's patches: whatever happened before."""
    if srv is not None:
        gone = await server.stop(session.conn, srv)
        store.event(run, "stopped", "process group gone" if gone else f"process group {srv.pgid} still alive after SIGKILL")
        final = await server.read_log(session.conn, srv)
        log = final or log
        store.save_log(run, redact_bytes(log, env))
        if not store.children(run, DebugRow):
            _store_debug_lines(store, run, log, spec.debug_pattern)
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


def _workload_metrics(result: workload.WorkloadResult) -> dict[str, Any]:
    return {
        "requests": len(result.requests),
        "completion_tokens": result.completion_tokens,
        "workload_s": result.wall_seconds,
        "output_tok_s": result.completion_tokens / result.wall_seconds if result.wall_seconds else None,
    }


def _record_metrics(store: Store, run: Run, metrics: dict[str, Any], result: workload.WorkloadResult,
                    info: dict[str, Any] | None, endpoint: str | None, log: bytes, spec: Spec,
                    plan: RunPlan, context: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Accept length from its three sources, the decode series, debug lines; flags and notes."""
    report = logs.parse_log_bytes(log, spec.debug_pattern)
    rows: list[MetricRow] = []
    notes: list[str] = []
    headline = result.accept_len
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=headline, source="meta_info",
                          note="sum(completion_tokens) / sum(spec_verify_ct) over the workload"))
    server_value = workload.avg_spec_accept_length(info)
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=server_value, source=f"server_info:{endpoint}",
                          note="" if server_value is not None else
                          "absent: the server updates it every decode-log interval (40 rounds by default)"))
    decode_values = [d.accept_len for d in report.decode if d.accept_len is not None]
    decode_mean = sum(decode_values) / len(decode_values) if decode_values else None
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=decode_mean, source="decode_log",
                          note=f"mean of {len(decode_values)} decode-line intervals"))
    accept_rates = [d.accept_rate for d in report.decode if d.accept_rate is not None]
    throughput = [d.gen_throughput for d in report.decode if d.gen_throughput is not None]
    metrics.update({
        "accept_len": headline,
        "accept_rate": accept_rates[-1] if accept_rates else None,
        "gen_throughput": sum(throughput) / len(throughput) if throughput else None,
        "decode_intervals": len(report.decode),
    })
    for name, value in metrics.items():
        if name != "accept_len":
            rows.append(MetricRow(run_id=run.id, name=name, value=value, source="orch"))
    store.add(*rows)
    store.add(*(SeriesRow(run_id=run.id, kind="decode", seq=i, time=d.time, values={
        "accept_len": d.accept_len, "accept_rate": d.accept_rate, "running_req": d.running_req,
        "tokens": d.tokens, "token_usage": d.token_usage, "gen_throughput": d.gen_throughput,
        "queue_req": d.queue_req}) for i, d in enumerate(report.decode)))
    _store_debug_lines(store, run, log, spec.debug_pattern, report.debug_lines)
    flags = []
    speculative = bool(context["params"].get("speculative_algorithm"))
    if speculative and headline is not None and headline <= REJECTED_AT_OR_BELOW:
        flags.append("draft-rejected")
        notes.append(f"accept length {headline:.2f}: the target accepts almost no draft tokens; run `orch check` on the experiment")
    for other in (server_value, decode_mean):
        if headline and other and abs(other - headline) / headline > DISAGREEMENT:
            store.event(run, "warning", f"accept length sources disagree: meta_info {headline:.2f} vs {other:.2f}")
            notes.append(f"warning: accept length sources disagree ({headline:.2f} vs {other:.2f})")
            break
    return flags, notes


def _store_debug_lines(store: Store, run: Run, log: bytes, pattern: str, lines: Any = None) -> None:
    if lines is None:
        lines = logs.parse_log_bytes(log, pattern).debug_lines
    store.add(*(DebugRow(run_id=run.id, seq=i, text=d.text, fields=d.fields) for i, d in enumerate(lines)))


def _check_expectations(plan: RunPlan, metrics: dict[str, Any]) -> list[str]:
    failed = []
    for name, rule in plan.expect.items():
        op, bound = specs.parse_expectation(rule, f"variant {plan.variant} expect {name}")
        value = metrics.get(name)
        checks = {">": lambda v: v > bound, ">=": lambda v: v >= bound, "<": lambda v: v < bound,
                  "<=": lambda v: v <= bound, "==": lambda v: v == bound, "!=": lambda v: v != bound}
        if value is None or not checks[op](value):
            failed.append(f"{name} = {value if value is None else round(value, 3)} is not {op} {bound}")
    return failed
