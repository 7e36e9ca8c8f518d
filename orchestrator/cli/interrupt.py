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
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import EXIT_INTERRUPTED
from . import ui

if TYPE_CHECKING:
    from orchestrator.api.runs import Sweep

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(work: Coroutine[Any, Any, T], sweep: Sweep) -> tuple[T | None, str | None]:
    """`work` (the sweep's runs) to its end: `(its result, None)`, or `(None, the signal's name)`
    once a signal stopped it and every host's cleanup is done."""
    return asyncio.run(_guarded(work, sweep))


async def _guarded(work: Coroutine[Any, Any, T], sweep: Sweep) -> tuple[T | None, str | None]:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    got: list[str] = []
    bound = sweep.cleanup_bound_s  # every server's grace, then the reverts
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
            _say(sweep.still_left())
            return
        got.append(sig.name)
        task.cancel(f"interrupted by {sig.name}")
        loop.call_later(bound, give_up)
        _say([f"{sig.name}: stopping every host's server and reverting every patch "
              f"(at most {bound:.0f} s; a second Ctrl-C says what is left)"])

    def give_up() -> None:
        _say([f"cleanup still not done after {bound:.0f} s; exiting", *sweep.still_left()])
        os._exit(EXIT_INTERRUPTED)

    def stop_asked(_signum: int, _frame: object) -> None:
        """`orch stop RUN` asks for one run of this sweep to stop (`run/runstop.py`)."""
        loop.call_soon_threadsafe(sweep.stop_asked)

    before = {sig: signal.signal(sig, at_once) for sig in SIGNALS}
    before[sweep.stop_signal] = signal.signal(sweep.stop_signal, stop_asked)
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
