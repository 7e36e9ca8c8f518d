"""The `undo` steps of a run's stage list (`lifecycle.py`), run backwards whatever happened: the
server's (every node's stopped, or rank 0's kept up for the next plan of its key; the logs read
once and recorded, the measures checked) and the patches' (every node's reverted); then the run's
row closed."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from orchestrator.errors import OrchError
from orchestrator.host import server
from orchestrator.host.session import HostSession
from orchestrator.remote.reconnecting import reconnections
from orchestrator.core.clock import now
from orchestrator.engines.base import LogReport
from orchestrator.store.reading import FAILED, SUCCEEDED
from . import collect, effective, multinode, serving, stages
from .attempt import Stage
from .going import Going

if TYPE_CHECKING:
    from orchestrator.store.database import Run, Store

_LAUNCHING = (Stage.LAUNCH, Stage.WAIT_READY)
LAUNCH_PID_WAIT_S = 5.0  # the launch command waits as long for the wrapper's pid file


async def stop_and_record(going: Going) -> None:
    """The server stopped on every node at once (or rank 0's kept for the next plan of its key, its
    log read so far), rank 0's log read once, then every node's log, the measures and the
    diagnosis recorded."""
    attempt, t = going.attempt, going.tally
    if attempt.serving is None and attempt.stage in _LAUNCHING:  # cancelled while the launch command ran
        found = await _launched(attempt.session, attempt.launch.run_dir, attempt.launch.port)
        if found is not None:
            serving.launched(attempt, found)
    held = going.held = attempt.serving
    log = b""
    stopping = asyncio.ensure_future(multinode.stop(attempt))  # the other nodes at once, beside rank 0
    kept = going.kept
    segment = await serving.kept_segment(attempt, going.keep) if t.status == SUCCEEDED and kept is not None else None
    if segment is not None:
        log = segment
    else:
        try:
            attempt.enter(Stage.STOP)
            log = serving.own_part(held, await stages.stop(attempt, held.srv if held else None))
        except (OrchError, OSError) as exc:  # the log read while waiting for readiness is what there is
            going.cleanup_errors.append(exc)
            log = held.read_so_far if held is not None and not held.log_offset else b""
    node_logs = await stopping
    attempt.enter(Stage.READ_LOG)
    report = attempt.engine.parse_log(log, attempt.spec.debug_pattern, _patched_files(attempt.store, t.run))
    attempt.enter(Stage.RECORD)
    _record(going, log, report)
    multinode.record_logs(node_logs, _patched_files(attempt.store, t.run))
    _measured(going, report)
    if segment is not None and kept is not None:
        kept.serving = held
        going.kept_up = True


def _record(going: Going, log: bytes, report: LogReport) -> None:
    """Rank 0's log, and what the engine ran with: read from the log of the run that launched the
    server (it holds the engine's print of its arguments), else inherited from that run."""
    attempt, held, run = going.attempt, going.held, going.tally.run
    if held is None:
        return
    collect.store_log(attempt.store, run, log, report)
    if going.reuse is None:
        effective.record(attempt, report, log)
    else:  # its part of the log does not: it ran on the launcher's server, with its arguments
        effective.inherit(attempt, going.reuse.launcher.run.id)


def _measured(going: Going, report: LogReport) -> None:
    """The measures recorded and checked against the plan's expectations; the whole log's
    diagnosis of a failed run."""
    attempt, t = going.attempt, going.tally
    store, run = attempt.store, t.run
    if t.measure is not None:
        found_flags, notes = collect.record(store, run, t.metrics, t.measure(report))
        attempt.known(**t.metrics)  # accept length, tokens/s
        t.flags.extend(found_flags)
        for note in notes:
            attempt.say(note)
        failed_expectations = collect.check_expectations(attempt.plan, t.metrics)
        if failed_expectations:
            t.status, t.exit_code = FAILED, 1
            t.error = "expectation failed: " + "; ".join(failed_expectations)
    if t.status == FAILED and report.diagnosis is not None and (t.diagnosis is None or report.diagnosis.decisive):
        # the whole log, read knowing the patched files, names the cause: it replaces the one made when the server died
        store.update_run(run, diagnosis=report.diagnosis.as_record())
        if t.requests_failed:
            # a request failed because the server died under it: the server's cause first
            t.error = f"the server failed during the workload: {report.diagnosis.summary} ({t.error})"


async def revert(going: Going) -> None:
    """Every node's patches reverted (rank 0's: the launching run's, for a run that used another's
    server), even when the stop failed; nothing while the server stays up for the next plan."""
    if going.kept_up:
        return
    t = going.tally
    await _revert(going)
    left = await multinode.revert(going.attempt)  # every other node's, whatever happened on rank 0's
    if left:
        t.error = "; ".join([*([t.error] if t.error else []), *left])
        t.status, t.exit_code = (FAILED, 1) if t.status == SUCCEEDED else (t.status, t.exit_code)


async def _revert(going: Going) -> None:
    """Rank 0's revert; a stop that failed is raised here, as a failed revert is: the run's error,
    status and exit code say so."""
    attempt, held, t = going.attempt, going.held, going.tally
    try:
        attempt.enter(Stage.REVERT)
        owner = held.launcher if held is not None else None
        drifted = await stages.revert_patches(attempt, owner, held.later_users if held is not None else ())
        if going.cleanup_errors:
            raise going.cleanup_errors[0]
        if drifted:  # the promise is an unmodified install: a file left changed fails the run
            t.flags.append("patch-drifted")
            t.error = (f"{t.error}; " if t.error else "") + f"{len(drifted)} patched file(s) changed during the run " \
                f"and were left as they are: {', '.join(drifted)}; see `orch patches`"
            t.status, t.exit_code = (FAILED, 1) if t.status == SUCCEEDED else (t.status, t.exit_code)
    except (OrchError, OSError) as exc:
        t.error = (f"{t.error}; " if t.error else "") + f"cleanup failed: {exc}"
        if t.status == SUCCEEDED:  # a run whose cleanup left something changed never exits 0
            t.status, t.exit_code = FAILED, exc.exit_code if isinstance(exc, OrchError) else 3
        attempt.store.event(attempt.run, "cleanup-failed", str(exc))


def close_row(going: Going) -> None:
    """The run's row closed: a link that was cut during it said, its status, error and flags."""
    attempt, t = going.attempt, going.tally
    store, run, session = attempt.store, t.run, attempt.session
    cut = collect.record_reconnections(store, run, session.host.name, reconnections(session.conn), t.links_from,
                                       t.workload_from)
    if cut and t.status == FAILED:
        t.error = (f"{t.error}; " if t.error else "") + cut
    t.run = store.update_run(run, status=t.status, error=t.error, flags=t.flags, ended_at=now())
    attempt.known(status=t.status)
    attempt.say(f"run {t.run.id} {t.status}" + (f": {t.error}" if t.error else ""))


def _patched_files(store: Store, run: Run) -> list[str]:
    """The files the run's patches touched, as written and as resolved: a diagnosis names them."""
    from orchestrator.store.database import PatchRow

    return [path for patch in store.children(run, PatchRow) for path in (patch.file, patch.target)]


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

