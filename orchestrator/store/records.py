"""Many runs' records in a few queries: what `orch report` reads of an experiment.

The same keys as Store.record (a subset: no env, command, events, histograms, checkpoint facts,
log; `note` its text alone), read per table for all the runs at once instead of a handful of queries per run, over plain
DB-API (store/reader.py).
"""

from __future__ import annotations

from typing import Any

from . import series, tags
from .queries import run_metrics
from .reader import Reader, columns, decoded, of

COLUMNS = ("id", "uid", "experiment", "variant", "host", "status", "repeat", "params", "flags", "error",
           "started_at", "ended_at")


def experiment_records(source: Any, experiment: str, series_value: str) -> list[dict[str, Any]]:
    """Every run of the experiment, oldest first: its columns, metrics {name: value} (the first
    row of each name), patches, debug lines, series, tags and note, as Store.record names them. Of the series
    only the points that carry `series_value`, and only it (kind, time, `series_value`): read
    inside the database, no row's whole JSON decoded."""
    reader = of(source)
    found = reader.rows(f"SELECT {columns(COLUMNS)} FROM run WHERE experiment = ? ORDER BY id", (experiment,))
    records = [{name: decoded(name, value) for name, value in zip(COLUMNS, row)} for row in found]
    ids = [r["id"] for r in records]
    metrics = run_metrics(reader, ids)
    children = _children(reader, ids, series_value)
    tagged, notes = tags.run_tags(reader, ids), tags.run_notes(reader, ids)
    for r in records:
        r["tags"], r["note"] = tagged.get(r["id"], {}), notes.get(r["id"])
        r["params"], r["flags"] = r["params"] or {}, list(r["flags"] or [])
        r["metrics"] = metrics.get(r["id"], {})
        for key in ("patches", "debug_lines", "series"):
            r[key] = children[key].get(r["id"], [])
    return records


def _children(reader: Reader, ids: list[int], series_value: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    if reader.kind == "postgresql":
        value, path = 'CAST(("values" ->> ?::text) AS FLOAT)', series_value
    else:
        value, path = 'CAST(JSON_EXTRACT("values", ?) AS FLOAT)', '$."' + series_value.replace('"', '""') + '"'
    patch = ("name", "target", "file", "sha256_before", "sha256_after", "state")
    tables = {
        "patches": (f"SELECT run_id, {columns(patch)} FROM patchrow WHERE run_id IN ({{ids}}) ORDER BY run_id, seq",
                    (), lambda row: dict(zip(patch, row))),
        "debug_lines": ("SELECT run_id, text, fields FROM debugrow WHERE run_id IN ({ids}) ORDER BY run_id, id",
                        (), lambda row: {"text": row[0], "fields": decoded("fields", row[1])}),
        "series": (f"SELECT run_id, kind, time, {value} FROM seriesrow WHERE {value} IS NOT NULL "
                   "AND run_id IN ({ids}) ORDER BY run_id, id", (path, path),
                   lambda row: {"kind": row[0], "time": row[1], series_value: row[2]}),
    }
    found: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for key, (sql, params, shape) in tables.items():
        rows = found[key] = {}
        for run_id, *values in reader.chunked(sql, ids, params):
            rows.setdefault(run_id, []).append(shape(values))
    for run_id, points in series.one_value(reader, ids, series_value).items():  # a run has rows or blocks
        found["series"].setdefault(run_id, []).extend(points)
    return found
