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
from . import checkpoint, hostflags, preflight_run
from .engines.sglang import logs
from .errors import EXIT_INTERRUPTED, HostError, OrchError, PatchError, SpecError
from .inventory import Host
from . import store as store_queries
from .journal import APPLIED, DRIFTED, Journal, PatchRecord
from .lock import Holder, HostLock
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
        conn = await connect(host, reconnect=True)  # a run finishes what it started across a dropped link
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
        # `sglang.srt:models/x.py` is `sglang:srt/models/x.py`: looking up a dotted name would
        # import its parent package, so only the top-level name is ever looked up.
        package, *inner = package.split(".")
        parts = [*inner, *relative.split("/")]
        if not package or not relative or any(p in ("", ".", "..") for p in parts):
            raise PatchError(f"{patch.where}: patch '{patch.name}': `file: {patch.file}` is not PACKAGE:relative/path "
                             f"(no empty, '.' or '..' parts); e.g. sglang:srt/models/llama_eagle3.py")
        if package not in self.packages:
            done = await self.conn.run(shell.package_dir(self.host.python, package, self.host.rehearsal_dir))
            folder = done.out.strip()
            if done.exit_status == 127:
                raise PatchError(f"{patch.where}: patch '{patch.name}': python {self.host.python} not found on "
                                 f"{self.host.name}; set the host's `python:` in the inventory")
            if not done.ok or not folder:
                raise PatchError(
                    f"{patch.where}: patch '{patch.name}': package '{package}' is not installed for "
                    f"{self.host.python} on {self.host.name}; set the host's `python:` or use an absolute path"
                )
            self.packages[package] = folder
        return "/".join([self.packages[package], *parts])


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


@dataclass(frozen=True)
class Recovery:
    """What `recover` cleaned up on a host before this command's work."""

    host: str
    broken: tuple[Holder, ...] = ()
    interrupted: tuple[str, ...] = ()  # uids of runs a dead controller left `running`
    reverted: tuple[PatchRecord, ...] = ()

    def notes(self) -> list[str]:
        """One line per act, for the events of the next run on the host."""
        lines = [f"broke a stale lock on {self.host} ({h.broken_because}): " + (h.owner.describe() if h.owner else h.content.strip())
                 for h in self.broken]
        if self.interrupted:
            lines.append(f"marked run(s) {', '.join(self.interrupted)} interrupted: their controller died")
        if self.reverted:
            states = ", ".join(f"{r.run}#{r.seq} {r.file}: {r.state}" for r in self.reverted)
            lines.append(f"reverted {len(self.reverted)} patch(es) left on {self.host}: {states}")
        return lines


async def recover(session: HostSession, store: Store, report: Report, *, force: bool = False,
                  broken: list[Holder] | tuple[Holder, ...] = ()) -> Recovery:
    """Clean up after commands that died on this host (call it holding the host lock): warn about
    the stale locks broken, stop servers they left running, revert the patches they left applied
    and mark their runs interrupted with the reason."""
    name = session.host.name
    dead: dict[str, str] = {}  # run uid -> why its controller is known to be dead
    for holder in broken:
        who = holder.owner.describe() if holder.owner else repr(holder.content.strip())
        report(name, f"warning: broke a stale lock ({holder.broken_because}): {who}")
        if holder.owner is not None:
            owner = holder.owner
            for run in store_queries.running_runs(store, name, f"{owner.controller}:{owner.pid}", owner.started_at):
                dead[run.uid] = f"its lock on {name} was found stale ({holder.broken_because})"
                store.event(run, "lock-broken", f"a later command broke its stale lock on {name}: {holder.broken_because}")
    leftovers = await session.journal.records()
    for record in leftovers:
        dead.setdefault(record.run, f"it left patches applied on {name}")
    if leftovers:
        report(name, f"reverting {len(leftovers)} patch(es) left applied by run(s) {', '.join(sorted({r.run for r in leftovers}))}")
    await _stop_leftover_servers(session, sorted(dead), report)
    reverted = await session.journal.revert(force=force) if leftovers else []
    await session.journal.sweep()
    interrupted = []
    for uid, why in sorted(dead.items()):
        try:
            old = store.get(uid)
        except OrchError:
            continue  # recorded in another database
        states = {r.seq: r.state for r in reverted if r.run == uid}
        if states:
            store.set_patch_states(old, states)
        store.event(old, "recovered", f"cleaned up by a later command on {name}; patch states: {states or 'none left'}")
        if old.status == RUNNING:
            interrupted.append(uid)
            left = "its patches were reverted by that command" if states else "it left no patches applied"
            store.update_run(old, status=INTERRUPTED, ended_at=now(),
                             error=f"the controller {old.controller} died before the run ended: {why}; {left}")
    return Recovery(name, tuple(broken), tuple(interrupted), tuple(reverted))


async def _stop_leftover_servers(session: HostSession, uids: list[str], report: Report) -> None:
    """A dead controller's server keeps its GPUs and port: stop each one that is still up."""
    for uid in uids:
        run_dir = f"{session.host.workdir}/runs/{uid}"
        try:
            pid = (await session.conn.read_file(f"{run_dir}/pid")).decode().strip()
        except FileNotFoundError:
            continue
        ended = await session.conn.stat(f"{run_dir}/exit_code")
        if not pid.isdigit() or ended is not None or not (await session.conn.run(shell.group_alive(int(pid)))).ok:
            continue
        gone = await server.stop(session.conn, server.Server(run_dir, int(pid), 0))
        report(session.host.name, f"stopped the server run {uid} left running (pid {pid})" if gone
               else f"warning: the server run {uid} left running (pid {pid}) survived SIGKILL")


def _context(spec: Spec, plan: RunPlan, host: Host, uid: str) -> dict[str, Any]:
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
        await hostflags.check_launch(session.conn, host, session.packages, script, spec.template, report, label)
        await checkpoint.push_stage(spec, plan, session, store, run, report, context)
        await preflight_run.gate(spec, plan, session, store, run, report, context)
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
        log = await server.read_log(session.conn, srv, spec.debug_pattern)
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
        if status == FAILED:
            _diagnose_stored_log(store, run, spec.debug_pattern)
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
        final = await server.read_log(session.conn, srv, spec.debug_pattern)
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


def _diagnose_stored_log(store: Store, run: Run, pattern: str) -> None:
    """A server that died after it was ready (mid-workload): the diagnosis from its stored log."""
    log = store.log(run)
    if store.get(run.uid).diagnosis is None and log:
        found = logs.parse_log_bytes(log, pattern).diagnosis
        if found is not None:
            store.update_run(run, diagnosis={"kind": found.kind, "summary": found.summary, "evidence": list(found.evidence)})


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
