"""What the one reading of a server log becomes in the store, as plain column values, and the
judging of a run's accept length: shared by the collection of a run (collect.py) and `orch import`,
which writes without the store's models (store/importing.py) and so imports nothing of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from orchestrator.bounds import cut_line, cut_values
from orchestrator.engines import seriesblock
from orchestrator.engines.base import DebugLine, LogReport, Measure
from orchestrator.store import series

REJECTED_AT_OR_BELOW = 1.05
DISAGREEMENT = 0.05

RunT = TypeVar("RunT")
RunT_contra = TypeVar("RunT_contra", contravariant=True)


class EventLog(Protocol[RunT_contra]):
    """Where a run's events go: the store (its Run), or the import's writer (an ImportedRun)."""

    def event(self, run: RunT_contra, kind: str, message: str) -> None: ...


def judge(store: EventLog[RunT], run: RunT, accept_lens: list[Measure]) -> tuple[list[str], list[str]]:
    """A headline at or below REJECTED_AT_OR_BELOW flags the draft as rejected; a source far from the
    headline is a warning (`store.event`: the store's, or the import's writer's)."""
    flags: list[str] = []
    notes: list[str] = []
    first = accept_lens[0] if accept_lens else None
    headline = first.value if first else None
    if headline is not None and headline <= REJECTED_AT_OR_BELOW:
        flags.append("draft-rejected")
        notes.append(f"accept length {headline:.2f}: the target accepts almost no draft tokens; run `orch check` on the experiment")
    for measure in accept_lens[1:]:
        other = measure.value
        if first and headline and other and abs(other - headline) / headline > DISAGREEMENT:
            store.event(run, "warning", f"accept length sources disagree: {first.source} {headline:.2f} vs "
                                        f"{measure.source} {other:.2f}")
            notes.append(f"warning: accept length sources disagree ({headline:.2f} vs {other:.2f})")
            break
    return flags, notes


def series_blocks(run_id: int, report: LogReport, node: int = 0) -> list[dict[str, Any]]:
    """The log's series points as SeriesBlockRow column values, packed by the BLOCK_POINTS (of node
    `node` of a run over several hosts)."""
    return series.block_values(run_id, seriesblock.from_points(report.series), node)


def debug_values(run_id: int, report: LogReport, node: int = 0) -> list[dict[str, Any]]:
    """The log's debug lines as DebugRow column values (of node `node` of a run over several hosts), each
    line and field cut to the stored bound."""
    return debug_rows(run_id, report.debug_lines, 0, node)


def debug_rows(run_id: int, lines: Sequence[DebugLine], first: int = 0, node: int = 0) -> list[dict[str, Any]]:
    """Debug lines as DebugRow column values, numbered from `first`, each cut to the stored bound."""
    return [{"run_id": run_id, "seq": i, "text": cut_line(d.text), "fields": cut_values(d.fields), "node": node}
            for i, d in enumerate(lines, first)]
