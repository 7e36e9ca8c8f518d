"""One run of a live sweep stopped alone (`orch stop RUN`): that run ends, the sweep goes on.

`orch stop RUN` records a `stop-asked` event on the run and sends its controller SIGUSR1 (a signal
carries no data: the store says which run). The controller (`asked`) cancels the task that runs
that plan, naming WHY; the run's own cleanup stops its server and reverts its patches, as for any
cancel (`execute.run_one`), and records it `failed`, "stopped by orch stop" (`cancelled`); the
sweep (`sweep._plan`) takes the cancel back and goes on with the next plan. The controller answers
each ask with a `stopping` event, or `stop-refused` saying why (a run over several hosts is not
stopped alone): what `orch stop` waits for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from orchestrator.engines.base import Say
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, OrchError, SpecError
from orchestrator.store.reading import FAILED, INTERRUPTED, RUNNING

if TYPE_CHECKING:
    from orchestrator.store.database import Run, Store

WHY = "stopped by orch stop"
SIGNAL = signal.SIGUSR1
ASKED, STOPPING, REFUSED = "stop-asked", "stopping", "stop-refused"  # the events of one ask


class Stops:
    """The runs of this `orch run` that can be stopped alone: the task running each plan now, by
    host and plan key (what a run's row names), and the tasks cancelled by an ask (with the run)."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], asyncio.Task[object]] = {}
        self._asked: dict[asyncio.Task[object], int] = {}  # task -> id of the run it was asked to stop

    @contextmanager
    def running(self, host: str, plan_key: str) -> Iterator[None]:
        """The current task runs this plan on this host while the block lasts."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks[(host, plan_key)] = task
        try:
            yield
        finally:
            self._tasks.pop((host, plan_key), None)

    def stop(self, run: Run) -> bool:
        """Cancel the task running `run`'s plan, naming WHY; False when no task runs it here."""
        task = self._tasks.get((run.host, run.plan_key or ""))
        if task is None or task in self._asked:
            return task is not None
        self._asked[task] = run.id or 0
        task.cancel(WHY)
        return True

    def taken_back(self, task: asyncio.Task[object]) -> int | None:
        """The id of the run an ask stopped in `task`, its cancel taken back; None when the cancel
        is the sweep's own (a signal) and must go on."""
        run_id = self._asked.pop(task, None)
        if run_id is None:
            return None
        return run_id if task.uncancel() == 0 else None  # a signal's cancel besides it: the sweep stops


STOPS = Stops()  # one sweep per `orch run` process


def asked(store: Store, controller: str) -> None:
    """SIGUSR1 came: every running run of this controller with an unanswered ask is stopped alone,
    or the ask refused, each answered with an event."""
    from orchestrator.store.database import EventRow

    for run in store.runs(status=RUNNING):
        if run.controller != controller:
            continue
        kinds = [e.kind for e in store.children(run, EventRow)]
        if ASKED not in kinds or STOPPING in kinds or REFUSED in kinds:
            continue
        if STOPS.stop(run):
            store.event(run, STOPPING, f"{WHY}: its task cancelled; the rest of the sweep goes on")
        else:
            store.event(run, REFUSED, "this run is not one this `orch run` can stop alone (a run over several "
                        f"hosts, or one just ending); `orch stop --sweep {run.uid}` stops its whole sweep")


def cancelled(exc: BaseException) -> tuple[str, str, int]:
    """A cancelled run's status, error and exit code: failed, WHY for a run stopped alone;
    interrupted, with the signal `orch run` got (when the cancel names it), otherwise."""
    said = str(exc.args[0]) if exc.args and exc.args[0] else ""
    if said == WHY:
        return FAILED, WHY, EXIT_RUN_FAILED
    return INTERRUPTED, said or "interrupted by the user", EXIT_INTERRUPTED


async def ask(store: Store, pid: int, run: Run, say: Say, bound_s: float) -> list[str] | OrchError:
    """Ask `orch run` pid `pid` to stop `run` alone, and wait (at most `bound_s`) for the run to end:
    the line saying how it ended, or why the controller refused (then `--sweep` is the way)."""
    from orchestrator.store.database import EventRow

    store.event(run, ASKED, f"`orch stop {run.uid}` (pid {os.getpid()}) asked its controller to stop it alone")
    say(run.host, f"run {run.uid} is run by `orch run` pid {pid}: asked it to stop that run alone; waiting for "
        "its cleanup")
    os.kill(pid, SIGNAL)
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        now = store.get(run.uid)
        if now.status != RUNNING:
            return [f"run {run.uid} {now.status} ({WHY}); the rest of its sweep goes on"]
        refused = [e.message for e in store.children(now, EventRow) if e.kind == REFUSED]
        if refused:
            return SpecError(f"run {run.uid}: {refused[0]}")
        await asyncio.sleep(0.2)
    return [f"warning: run {run.uid} is still running {bound_s:.0f} s after the ask; `orch stop --sweep {run.uid}` "
            "stops its whole sweep"]
