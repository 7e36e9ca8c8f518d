"""The order of a run's stages (`run/lifecycle.py`): the real stage list, each stage's do and undo
replaced by a recorder, so only the order is looked at. A run that succeeds patches, launches,
sends its workload, then stops and reverts; a launch that fails, or a run cancelled during its
workload, still stops and reverts, the stop first. The host commands of each stage are pinned on
the fake Connection in test_fake_sequences.py and test_fake_connection.py."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from orchestrator.errors import ServerError
from orchestrator.run import lifecycle, teardown
from orchestrator.run.going import Going


def recorded(monkeypatch: pytest.MonkeyPatch, fail: dict[str, BaseException]) -> list[str]:
    """The launching list with recorders for its steps (a step named in `fail` raises that); the
    names of what ran, in order, the row's closing included."""
    seen: list[str] = []

    def recorder(name: str):
        async def step(_going: Going) -> None:
            seen.append(name)
            if name in fail:
                raise fail[name]
        return step

    steps = tuple(dataclasses.replace(s, do=recorder(s.name),
                                      undo=recorder(f"undo {s.name}") if s.undo is not None else None)
                  for s in lifecycle.LAUNCHING)
    monkeypatch.setattr(lifecycle, "LAUNCHING", steps)
    monkeypatch.setattr(teardown, "close_row", lambda _going: seen.append("close row"))
    return seen


def going() -> Going:
    """A one-node run: no peers to watch, a tally the stages fill in."""
    return Going(SimpleNamespace(peers=[], reporter=SimpleNamespace()),  # type: ignore[arg-type]
                 SimpleNamespace(workload_from=None, status=None, exit_code=None))  # type: ignore[arg-type]


def worked_then_cleaned(run: Going) -> BaseException | None:
    """lifecycle.work, then lifecycle.clean_up whatever work raised (as run_one's `finally` does)."""
    async def both() -> BaseException | None:
        try:
            await lifecycle.work(run)
            return None
        except (Exception, asyncio.CancelledError) as exc:
            return exc
        finally:
            await lifecycle.clean_up(run)
    return asyncio.run(both())


BRINGUP = ["check flags", "check host", "push checkpoints", "preflight", "patches", "server"]


def test_a_run_that_succeeds_stops_its_server_then_reverts_its_patches(monkeypatch: pytest.MonkeyPatch):
    seen = recorded(monkeypatch, {})
    run = going()
    assert worked_then_cleaned(run) is None
    assert seen == [*BRINGUP, "workload", "undo server", "undo patches", "close row"]
    assert (run.tally.status, run.tally.exit_code) == ("succeeded", 0)


def test_a_failed_launch_still_stops_and_reverts_and_sends_no_workload(monkeypatch: pytest.MonkeyPatch):
    seen = recorded(monkeypatch, {"server": ServerError("exited before ready")})
    assert isinstance(worked_then_cleaned(going()), ServerError)
    assert seen == [*BRINGUP, "undo server", "undo patches", "close row"]


def test_a_run_cut_short_before_its_patches_still_runs_the_stop_and_the_revert(monkeypatch: pytest.MonkeyPatch):
    seen = recorded(monkeypatch, {"check host": ServerError("host facts unreadable")})
    worked_then_cleaned(going())
    # a patch or a launch cut short leaves what only the revert and the stop find: both always run
    assert seen == ["check flags", "check host", "undo server", "undo patches", "close row"]


def test_a_run_cancelled_during_its_workload_stops_then_reverts(monkeypatch: pytest.MonkeyPatch):
    seen = recorded(monkeypatch, {"workload": asyncio.CancelledError()})
    run = going()
    assert isinstance(worked_then_cleaned(run), asyncio.CancelledError)
    assert seen == [*BRINGUP, "workload", "undo server", "undo patches", "close row"]
    assert run.tally.status is None  # not succeeded
