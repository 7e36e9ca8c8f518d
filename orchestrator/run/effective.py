"""What the engine ran, next to what the command asked: the engine's own print of its arguments
recorded on the run (`effective_params`), and each value it changed a `param-adjusted` event with
both values and the engine's log line (SGLang rewrites `--speculative-num-draft-tokens` to steps + 1
when topk is 1, NEXTN to EAGLE, ...), warned once per sweep."""

from __future__ import annotations

from orchestrator.engines.base import LogReport
from orchestrator.engines.command import adjusted
from .attempt import Attempt


async def asked(attempt: Attempt) -> None:
    """The launch command's options as the host's engine parses them, kept in the launch for the comparison."""
    attempt.read(await attempt.engine.launch_args(attempt.session.reading(), attempt.launch.command, attempt.launch.env))


def record(attempt: Attempt, report: LogReport, log: bytes) -> None:
    """The effective args on the run, and an event (and a warning) per value the engine changed."""
    effective = attempt.engine.effective_args(report.launch_args, report.engine_config)
    if effective is None:
        return
    attempt.store.update_run(attempt.run, effective_params=effective)
    for change in adjusted(attempt.launch.asked, effective, log.decode(errors="replace")):
        attempt.store.event(attempt.run, "param-adjusted", change.message())
        attempt.warn(f"param adjusted by the engine: {change.message()}")


def inherit(attempt: Attempt, launcher_id: int | None) -> None:
    """A run on a server another run launched ran with that server's arguments (`serving.py`)."""
    if launcher_id is None:
        return
    found = attempt.store.get(str(launcher_id)).effective_params
    if found is not None:
        attempt.store.update_run(attempt.run, effective_params=found)
