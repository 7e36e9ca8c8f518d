"""What a finished run leaves behind, turned into records: metrics with their sources, the log's
series and debug lines (from the one reading of the log), flags and expectations."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.core import spec as specs
from orchestrator.core.spec import RunPlan, Workload
from orchestrator.engines.base import HEADLINE, LogReport, Measures, WorkloadResult
from orchestrator.remote import Reconnection
from orchestrator.run import workload
from orchestrator.run.logrows import debug_values, judge, series_blocks  # shared with `orch import`
from orchestrator.store.rowid import stored_id

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Run, SeriesRow, Store


def workload_metrics(result: WorkloadResult) -> dict[str, Any]:
    return {
        "requests": len(result.requests),
        "completion_tokens": result.completion_tokens,
        "workload_s": result.wall_seconds,
        "output_tok_s": result.completion_tokens / result.wall_seconds if result.wall_seconds else None,
        **workload.latency_metrics(result),
    }


def store_requests(store: Store, run: Run, result: WorkloadResult, load: Workload) -> None:
    """The workload's requests, one row each (in one INSERT), and what every request was sent with."""
    from orchestrator.store.database import RequestRow
    sent: dict[str, str | float | int | None] = {"endpoint": load.endpoint, "max_new_tokens": load.max_new_tokens, **workload.sampling(load)}
    if load.dataset is not None:
        sent.update(dataset=load.dataset, format=load.format, num_prompts=load.num_prompts, seed=load.seed)
    store.event(run, "workload", json.dumps(sent, sort_keys=True))
    run_id = stored_id(run)
    store.add_children(RequestRow, [
        {"run_id": run_id, "seq": seq, "at_s": round(r.at, 6), "ttft_ms": None if r.ttft is None else round(r.ttft * 1000, 3),
         "e2e_ms": round(r.latency * 1000, 3), "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
         "accept_len": r.accept_len, "itl_ms": [round(gap * 1000, 3) for gap in r.itl]}
        for seq, r in enumerate(result.requests)])


def record(store: Store, run: Run, metrics: dict[str, Any], measures: Measures) -> tuple[list[str], list[str]]:
    """Every measure of the run with its source (the first accept length is the headline), orch's
    own metrics, the engine's histograms; flags and notes. `metrics` gains each measure's first value."""
    from orchestrator.store.database import HistogramRow, MetricRow
    run_id = stored_id(run)
    headlines = [m for m in measures.values if m.name == HEADLINE]
    rows = [MetricRow(run_id=run_id, name=m.name, value=m.value, source=m.source, note=m.note) for m in headlines]
    own = dict(metrics)
    for measure in measures.values:
        metrics.setdefault(measure.name, measure.value)
    for name, value in own.items():
        rows.append(MetricRow(run_id=run_id, name=name, value=value, source="orch"))
    rows.extend(MetricRow(run_id=run_id, name=m.name, value=m.value, source=m.source, note=m.note)
                for m in measures.values if m.name != HEADLINE)
    store.add(*rows)
    store.add(*(HistogramRow(run_id=run_id, name=h.name, counts=list(h.counts), source=h.source, note=h.note)
                for h in measures.histograms))
    return judge(store, run, headlines)


def store_log(store: Store, run: Run, log: bytes, report: LogReport) -> None:
    """The log and what was read from it once: its series and its debug lines."""
    from orchestrator.store.database import DebugRow, SeriesBlockRow
    store.save_log(run, log)  # the store hides the run's secrets in all it writes
    # tens of thousands of rows for a long log: written as column values in one INSERT each
    store.add_children(SeriesBlockRow, series_blocks(stored_id(run), report))
    store.add_children(DebugRow, debug_values(stored_id(run), report))


def series_rows(run_id: int, report: LogReport) -> list[SeriesRow]:
    from orchestrator.store.database import SeriesRow
    return [SeriesRow(run_id=run_id, kind=p.kind, seq=p.seq, time=p.time, values=dict(p.values)) for p in report.series]


def record_reconnections(store: Store, run: Run, host: str, reopened: Sequence[Reconnection], since: int,
                         workload_from: int | None) -> str | None:
    """Each link reopened from `since` on becomes a "reconnected" event. Returns a clause for the
    run's error when one was reopened from `workload_from` on (the workload was running): its HTTP
    requests went through the forward of the old link and were cut, which their error does not say."""
    from orchestrator.store.database import EventRow
    run_id = stored_id(run)
    store.add(*(EventRow(run_id=run_id, at=link.at, kind="reconnected",
                         message=f"the SSH link to {host} was reopened after it was lost: {link.reason}")
                for link in reopened[since:]))
    cut = reopened[workload_from:] if workload_from is not None else ()
    if not cut:
        return None
    return (f"the SSH link to {host} dropped during the workload ({cut[0].reason}) and was reopened: "
            f"the requests in flight were cut")


COMPARISONS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
               "!=": operator.ne}


def check_expectations(plan: RunPlan, metrics: dict[str, Any]) -> list[str]:
    failed = []
    for name, rule in plan.expect.items():
        op, bound = specs.parse_expectation(rule, f"variant {plan.variant} expect {name}")
        value = metrics.get(name)
        if value is None or not COMPARISONS[op](value, bound):
            failed.append(f"{name} = {value if value is None else round(value, 3)} is not {op} {bound}")
    return failed
