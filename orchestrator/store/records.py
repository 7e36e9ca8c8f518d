"""Many runs' records in a few queries: what `orch report` reads of an experiment.

The same keys as Store.record (a subset: no env, command, events, histograms, checkpoint facts,
log), read per table for all the runs at once instead of a handful of queries per run.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import select

from .database import DebugRow, PatchRow, Run, SeriesRow, Store
from .queries import CHUNK, run_metrics

COLUMNS = ("id", "uid", "experiment", "variant", "host", "status", "repeat", "params", "flags", "error",
           "started_at", "ended_at")


def experiment_records(store: Store, experiment: str, series_value: str) -> list[dict[str, Any]]:
    """Every run of the experiment, oldest first: its columns, metrics {name: value} (the first
    row of each name), patches, debug lines and series, as Store.record names them. Of the series
    only the points that carry `series_value`, and only it (kind, time, `series_value`): read
    inside the database, no row's whole JSON decoded."""
    query = select(*(getattr(Run, c) for c in COLUMNS)).where(Run.experiment == experiment).order_by(Run.id)
    with store.engine.connect() as conn:
        records = [dict(zip(COLUMNS, row)) for row in conn.execute(query)]
    ids = [r["id"] for r in records]
    metrics = run_metrics(store, ids)
    children = _children(store, ids, series_value)
    for r in records:
        r["params"], r["flags"] = r["params"] or {}, list(r["flags"] or [])
        r["metrics"] = metrics.get(r["id"], {})
        for key in ("patches", "debug_lines", "series"):
            r[key] = children[key].get(r["id"], [])
    return records


def _children(store: Store, ids: list[int], series_value: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    value = SeriesRow.values[series_value].as_float()  # type: ignore[index]
    tables = {
        "patches": (select(PatchRow.run_id, PatchRow.name, PatchRow.target, PatchRow.file, PatchRow.sha256_before,
                           PatchRow.sha256_after, PatchRow.state), PatchRow, PatchRow.seq,
                    lambda row: dict(zip(("name", "target", "file", "sha256_before", "sha256_after", "state"), row))),
        "debug_lines": (select(DebugRow.run_id, DebugRow.text, DebugRow.fields), DebugRow, DebugRow.id,
                        lambda row: {"text": row[0], "fields": row[1]}),
        "series": (select(SeriesRow.run_id, SeriesRow.kind, SeriesRow.time, value).where(value.is_not(None)),
                   SeriesRow, SeriesRow.id, lambda row: {"kind": row[0], "time": row[1], series_value: row[2]}),
    }
    found: dict[str, dict[int, list[dict[str, Any]]]] = {}
    with store.engine.connect() as conn:
        for key, (query, table, order, shape) in tables.items():
            rows = found[key] = {}
            for start in range(0, len(ids), CHUNK):
                part = query.where(table.run_id.in_(ids[start:start + CHUNK])).order_by(table.run_id, order)
                for run_id, *values in conn.execute(part):
                    rows.setdefault(run_id, []).append(shape(values))
    return found
