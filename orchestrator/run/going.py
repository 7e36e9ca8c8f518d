"""What a run carries through its stages (`lifecycle.py`): the `Going` run, its `Tally`, and the
`Step`s its stage list is made of."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.core.secrets import hide
from orchestrator.engines.base import Diagnosis, LogReport, Measures
from orchestrator.errors import OrchError, ServerError, WorkloadError
from orchestrator.store.reading import FAILED
from . import runstop
from .attempt import Attempt, Serving, Stage
from .outcome import Outcome
from .serving import Keep, Kept

if TYPE_CHECKING:  # the ORM is imported where a run is written: a dry run does without it
    from orchestrator.store.database import Run

@dataclass
class Tally:
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

    def failed(self, attempt: Attempt, exc: OrchError) -> None:
        """The run's error, as the stage that raised it gave it; a server's diagnosis recorded now."""
        self.error, self.evidence, self.exit_code = str(exc), exc.evidence, exc.exit_code
        self.requests_failed = isinstance(exc, WorkloadError) and attempt.stage == Stage.WORKLOAD
        self.diagnosis = exc.diagnosis if isinstance(exc, ServerError) else None
        if self.diagnosis is not None:
            attempt.store.update_run(self.run, diagnosis=self.diagnosis.as_record())

    def cancelled(self, exc: KeyboardInterrupt | asyncio.CancelledError) -> None:
        """A signal to `orch run` cancels its runs (cli/interrupt.py); the cancel names the signal:
        one run stopped alone (`orch stop`), or the sweep."""
        self.status, self.error, self.exit_code = runstop.cancelled(exc)

    def outcome(self, attempt: Attempt) -> Outcome:
        """The Outcome the run comes to, its secret values hidden."""
        hidden = attempt.secrets
        error = hide(self.error, hidden) if self.error else self.error
        return Outcome(self.run.id, self.run.uid, attempt.plan.variant, attempt.launch.host, self.status,
                       self.metrics, tuple(self.flags), error, tuple(hide(e, hidden) for e in self.evidence),
                       self.exit_code)


async def _never() -> bool:
    return False


@dataclass
class Going:
    """One run as its stages go: rank 0's Attempt (each other node's is in `attempt.peers`), its
    tally, the server it joins (`reuse`) and where a server it leaves up goes (`kept`, `keep`)."""

    attempt: Attempt
    tally: Tally
    reuse: Serving | None = None
    kept: Kept | None = None
    keep: Keep = _never  # no plan of its key waits: the server is stopped
    entered: list[Step] = field(default_factory=list)  # the stages begun, in order
    held: Serving | None = None  # the server the run used, as its stop found it
    kept_up: bool = False  # the server stays up for the next plan of its key: nothing is stopped or reverted
    cleanup_errors: list[BaseException] = field(default_factory=list)  # a stop that failed: the revert raises it

    @property
    def nodes(self) -> list[Attempt]:
        """Every node's Attempt, rank 0 first: a run on one host is a list of one."""
        return [self.attempt, *self.attempt.peers]


Do = Callable[[Going], Awaitable[None]]


@dataclass(frozen=True)
class Step:
    """One stage of a run's list: its `do`, and the `undo` of what it holds (run backwards by the
    cleanup). `always`: the undo runs whether or not the run got as far as the stage, as the
    stop and the revert always have (a launch or a patch cut short leaves what only they find)."""

    name: str
    do: Do
    undo: Do | None = None
    always: bool = False
