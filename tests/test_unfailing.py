"""The reporter a run's cleanup speaks through (`attempt.unfailing`): a closed pipe or a hung-up
terminal loses the lines, never the cleanup; anything else still raises."""

from __future__ import annotations

import pytest

from orchestrator.run.attempt import Stage, unfailing


class Unwritable:
    """A reporter whose terminal is gone: every hook raises what the closed output raises."""

    def __init__(self, error: BaseException):
        self.error = error
        self.calls: list[str] = []

    def _fail(self, hook: str) -> None:
        self.calls.append(hook)
        raise self.error

    def message(self, label: str, text: str) -> None:
        self._fail("message")

    def warning(self, label: str, text: str) -> None:
        self._fail("warning")

    def transfer(self, label: str):
        self._fail("transfer")

    def stage(self, label: str, stage: Stage) -> None:
        self._fail("stage")

    def known(self, label: str, values: dict) -> None:
        self._fail("known")


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), OSError(5, "EIO"), SystemExit(1)])
def test_every_hook_loses_its_line_when_the_output_is_gone(error: BaseException):
    inner = Unwritable(error)
    reporter = unfailing(inner)
    reporter.message("v@h #1", "stopped")
    reporter.warning("v@h #1", "drifted")
    reporter.stage("v@h #1", Stage.STOP)
    reporter.known("v@h #1", {"status": "interrupted"})
    progress = reporter.transfer("v@h #1 draft")
    progress("end", 0)  # a transfer nobody sees still takes its progress
    assert inner.calls == ["message", "warning", "stage", "known", "transfer"]


def test_an_error_that_is_no_lost_output_still_raises():
    with pytest.raises(ValueError):
        unfailing(Unwritable(ValueError("a bug"))).message("v@h #1", "text")
