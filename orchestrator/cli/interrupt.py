"""`orch run` under SIGINT, SIGTERM and SIGHUP (a closed terminal): the first signal cancels the
sweep, so each host's run stops its server and reverts its patches in its own cleanup (which no
later cancellation cuts short, `run/execute.py`); a second one says what is still being cleaned up
and the command that finishes it should orch be killed. Past CLEANUP_BOUND_S orch gives up and
exits 130 all the same, saying what is left: the journal survives a kill at any point.

The default action of SIGTERM and SIGHUP ends the process at once, no `finally` run: hence a
handler for all three, which hands the signal to the event loop. SIGUSR1 is `orch stop RUN` asking
for one run alone to stop while the sweep goes on (`run/runstop.py`)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.core.spec import RunPlan
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED
from orchestrator.run.stopping import CLEANUP_BOUND_S  # every server's grace, then the reverts
from orchestrator.run import runstop
from orchestrator.store.reading import INTERRUPTED, RUNNING, SUCCEEDED
from . import ui

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Run, Store

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(work: Coroutine[Any, Any, T], store: Store, controller: str, since: str) -> tuple[T | None, str | None]:
    """`work` to its end: `(its result, None)`, or `(None, the signal's name)` once a signal
    stopped it and every host's cleanup is done."""
    return asyncio.run(_guarded(work, store, controller, since))


async def _guarded(work: Coroutine[Any, Any, T], store: Store, controller: str, since: str) -> tuple[T | None, str | None]:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    got: list[str] = []
    # asked now: once the terminal has hung up, isatty() fails like every write to it
    on_terminal = os.isatty(1) or os.isatty(2)

    def at_once(signum: int, _frame: object) -> None:
        """Python's handler, run in the main thread as soon as the signal arrives: a closed
        terminal is let go of before any further write to it fails (EIO) and fails a run."""
        if signum == signal.SIGHUP and on_terminal and not got:
            _detach_terminal()
        loop.call_soon_threadsafe(on_signal, signal.Signals(signum))

    def on_signal(sig: signal.Signals) -> None:
        if got:  # the cleanup goes on: say what it still has to do
            _say(still_left(store, controller, since))
            return
        got.append(sig.name)
        task.cancel(f"interrupted by {sig.name}")
        loop.call_later(CLEANUP_BOUND_S, give_up)
        _say([f"{sig.name}: stopping every host's server and reverting every patch "
              f"(at most {CLEANUP_BOUND_S:.0f} s; a second Ctrl-C says what is left)"])

    def give_up() -> None:
        _say([f"cleanup still not done after {CLEANUP_BOUND_S:.0f} s; exiting", *still_left(store, controller, since)])
        os._exit(EXIT_INTERRUPTED)

    def stop_asked(_signum: int, _frame: object) -> None:
        """`orch stop RUN` asks for one run of this sweep to stop (`run/runstop.py`)."""
        loop.call_soon_threadsafe(runstop.asked, store, controller)

    before = {sig: signal.signal(sig, at_once) for sig in SIGNALS}
    before[runstop.SIGNAL] = signal.signal(runstop.SIGNAL, stop_asked)
    try:
        return await task, None
    except asyncio.CancelledError:
        if not got:
            raise
        return None, got[0]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _say(lines: list[str]) -> None:
    """Lines to the user that may be lost (a closed pipe) but never stop the cleanup."""
    try:
        for line in lines:
            ui.error(line)
    except (OSError, SystemExit):  # rich's console turns a broken pipe into SystemExit (and goes quiet)
        pass


def _detach_terminal() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def still_left(store: Store, controller: str, since: str) -> list[str]:
    """What the cleanup has not finished, host by host, and the command that finishes it."""
    from orchestrator.store.database import controller_runs
    running = [r for r in controller_runs(store, controller, since) if r.status == RUNNING]
    if not running:
        return ["nothing left running; orch exits once every host's connection is closed"]
    pid = controller.rsplit(":", 1)[-1]
    return [f"{r.host}: run {r.uid} is still stopping its server / reverting its patches; if orch must stop now "
            f"(kill -9 {pid}), `orch revert --host {r.host}` finishes the cleanup" for r in running]


def report(store: Store, controller: str, since: str, hosts: list[str],
           plans: list[RunPlan]) -> tuple[list[Any], list[RunPlan]]:
    """Print what the interruption did on each host; return the outcomes for the summary (every run
    this command made) and the plans it never started."""
    from orchestrator.store.database import controller_runs
    from orchestrator.run.execute import Outcome

    made = controller_runs(store, controller, since)
    for host in hosts:
        ui.progress(host, _host_line([r for r in made if r.host == host], store))
    outcomes = [Outcome(r.id, r.uid, r.variant, r.host, r.status, store.record(r)["metrics"], tuple(r.flags or ()),
                        r.error, exit_code=_exit_code(r.status)) for r in made]
    started = Counter(r.plan_key for r in made)
    unstarted = []
    for plan in plans:
        if started[plan.key] > 0:
            started[plan.key] -= 1
            continue
        unstarted.append(plan)
    return outcomes, unstarted


def _host_line(runs: list[Run], store: Store) -> str:
    from orchestrator.store.database import PatchRow
    cut = [r for r in runs if r.status == INTERRUPTED]
    if not cut:
        return f"no run was in progress; {len(runs)} run(s) had ended"
    parts = []
    for r in cut:
        events = {e["kind"]: e["message"] for e in store.record(r)["events"]}
        stopped = f"server stopped ({events['stopped']})" if "stopped" in events else "no server was running"
        patches = store.children(r, PatchRow)
        reverted = sum(p.state == "reverted" for p in patches)
        left = len(patches) - reverted
        parts.append(f"run {r.uid} interrupted: {stopped}; {reverted} patch(es) reverted"
                     + (f", {left} not reverted: see `orch patches`" if left else ""))
    return "; ".join(parts)


def _exit_code(status: str) -> int:
    return {SUCCEEDED: EXIT_OK, INTERRUPTED: EXIT_INTERRUPTED}.get(status, EXIT_RUN_FAILED)
