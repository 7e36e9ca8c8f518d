"""What a finished run leaves behind, turned into records: metrics with their sources, the decode
series, debug lines, flags, expectations and the diagnosis of a stored log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.core import spec as specs
from orchestrator.engines.sglang import client as workload
from orchestrator.engines.sglang import logs
from orchestrator.remote.reconnecting import Reconnection
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.store.database import DebugRow, EventRow, HistogramRow, MetricRow, PatchRow, Run, SeriesRow, Store

REJECTED_AT_OR_BELOW = 1.05
DISAGREEMENT = 0.05


def workload_metrics(result: workload.WorkloadResult) -> dict[str, Any]:
    return {
        "requests": len(result.requests),
        "completion_tokens": result.completion_tokens,
        "workload_s": result.wall_seconds,
        "output_tok_s": result.completion_tokens / result.wall_seconds if result.wall_seconds else None,
    }


def record(store: Store, run: Run, metrics: dict[str, Any], result: workload.WorkloadResult,
                    info: dict[str, Any] | None, endpoint: str | None, log: bytes, spec: Spec,
                    plan: RunPlan, context: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Accept length from its three sources, the decode series, debug lines; flags and notes."""
    report = logs.parse_log_bytes(log, spec.debug_pattern)
    rows: list[MetricRow] = []
    notes: list[str] = []
    headline = result.accept_len
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=headline, source="meta_info",
                          note="sum(completion_tokens) / sum(spec_verify_ct) over the workload"))
    server_value = workload.avg_spec_accept_length(info)
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=server_value, source=f"server_info:{endpoint}",
                          note="" if server_value is not None else
                          "absent: the server updates it every decode-log interval (40 rounds by default)"))
    from_log = log_metrics(report)
    notes_of = log_metric_notes(from_log)
    decode_mean = from_log.pop("accept_len")
    rows.append(MetricRow(run_id=run.id, name="accept_len", value=decode_mean, source="decode_log",
                          note=notes_of["accept_len"]))
    metrics.update({"accept_len": headline, **from_log})
    for name, value in metrics.items():
        if name != "accept_len":
            rows.append(MetricRow(run_id=run.id, name=name, value=value, source="decode_log" if name in notes_of
                                  else "orch", note=notes_of.get(name, "")))
    store.add(*rows)
    store_histogram(store, run, result)
    store.add(*series_rows(run.id, report))
    store_debug_lines(store, run, log, spec.debug_pattern, report.debug_lines)
    flags = []
    speculative = bool(context["params"].get("speculative_algorithm"))
    if speculative and headline is not None and headline <= REJECTED_AT_OR_BELOW:
        flags.append("draft-rejected")
        notes.append(f"accept length {headline:.2f}: the target accepts almost no draft tokens; run `orch check` on the experiment")
    for other in (server_value, decode_mean):
        if headline and other and abs(other - headline) / headline > DISAGREEMENT:
            store.event(run, "warning", f"accept length sources disagree: meta_info {headline:.2f} vs {other:.2f}")
            notes.append(f"warning: accept length sources disagree ({headline:.2f} vs {other:.2f})")
            break
    return flags, notes


def store_histogram(store: Store, run: Run, result: workload.WorkloadResult) -> None:
    """The workload's correct-drafts histogram (summed over its requests), when the server sent one."""
    counts = result.correct_drafts_histogram
    if counts is not None:
        store.add(HistogramRow(run_id=run.id, name=workload.CORRECT_DRAFTS, counts=counts, source="meta_info",
                               note=workload.CORRECT_DRAFTS_NOTE))


def diagnose_stored_log(store: Store, run: Run, pattern: str) -> None:
    """A failed run: the diagnosis from its stored log (a server that died mid-workload has none yet),
    read knowing the files the run's patches touched. It replaces the one made when the server died
    when it names a patched model file that no longer imports: that is the cause."""
    log = store.log(run)
    current = store.get(run.uid).diagnosis
    patched = [path for patch in store.children(run, PatchRow) for path in (patch.file, patch.target)]
    if not log or (current is not None and not patched):
        return
    found = logs.parse_log_bytes(log, pattern, patched).diagnosis
    if found is not None and (current is None or found.kind == logs.PATCHED_MODULE_IMPORT):
        store.update_run(run, diagnosis={"kind": found.kind, "summary": found.summary, "evidence": list(found.evidence)})


LOG_MEANS = ("accept_len", "accept_rate", "gen_throughput")  # decode-line values averaged over the run


def log_metrics(report: logs.LogReport) -> dict[str, Any]:
    """What the decode lines say of the whole run: the mean of each of LOG_MEANS over the lines that
    print it (accept rate as accept length: one number per log interval, each interval alike), and
    how many log intervals there were."""
    metrics: dict[str, Any] = {}
    for name in LOG_MEANS:
        values = [v for v in (getattr(d, name) for d in report.decode) if v is not None]
        metrics[name] = sum(values) / len(values) if values else None
        metrics[f"{name}_intervals"] = len(values)
    metrics["decode_intervals"] = len(report.decode)
    return metrics


def log_metric_notes(metrics: dict[str, Any]) -> dict[str, str]:
    """How each decode-line metric was aggregated, for `orch show`; pops the interval counts."""
    return {name: f"mean of {metrics.pop(f'{name}_intervals')} decode-line intervals" for name in LOG_MEANS}


def series_rows(run_id: int, report: logs.LogReport) -> list[SeriesRow]:
    """One row per decode and per prefill log line: its named values, the ranks that printed it
    ("DP1 TP0") and any other number the line carried, under its printed name."""
    rows = []
    for kind, records in (("decode", report.decode), ("prefill", report.prefill)):
        for seq, line in enumerate(records):
            values = {name: value for name, value in line._asdict().items()
                      if name not in ("time", "ranks", "extra", "graph")}
            if line.ranks:
                values["ranks"] = " ".join(f"{name}{number}" for name, number in line.ranks.items())
            rows.append(SeriesRow(run_id=run_id, kind=kind, seq=seq, time=line.time, values={**values, **line.extra}))
    return rows


def record_reconnections(store: Store, run: Run, host: str, reopened: Sequence[Reconnection], since: int,
                         workload_from: int | None) -> str | None:
    """Each link reopened from `since` on becomes a "reconnected" event. Returns a clause for the
    run's error when one was reopened from `workload_from` on (the workload was running): its HTTP
    requests went through the forward of the old link and were cut, which their error does not say."""
    store.add(*(EventRow(run_id=run.id, at=link.at, kind="reconnected",
                         message=f"the SSH link to {host} was reopened after it was lost: {link.reason}")
                for link in reopened[since:]))
    cut = reopened[workload_from:] if workload_from is not None else ()
    if not cut:
        return None
    return (f"the SSH link to {host} dropped during the workload ({cut[0].reason}) and was reopened: "
            f"the requests in flight were cut")


def store_debug_lines(store: Store, run: Run, log: bytes, pattern: str, lines: Any = None) -> None:
    if lines is None:
        lines = logs.parse_log_bytes(log, pattern).debug_lines
    store.add(*(DebugRow(run_id=run.id, seq=i, text=d.text, fields=d.fields) for i, d in enumerate(lines)))


def check_expectations(plan: RunPlan, metrics: dict[str, Any]) -> list[str]:
    failed = []
    for name, rule in plan.expect.items():
        op, bound = specs.parse_expectation(rule, f"variant {plan.variant} expect {name}")
        value = metrics.get(name)
        checks = {">": lambda v: v > bound, ">=": lambda v: v >= bound, "<": lambda v: v < bound,
                  "<=": lambda v: v <= bound, "==": lambda v: v == bound, "!=": lambda v: v != bound}
        if value is None or not checks[op](value):
            failed.append(f"{name} = {value if value is None else round(value, 3)} is not {op} {bound}")
    return failed
