"""Read-only queries for comparing runs and listing them: plain data out, a few columns per query,
over plain DB-API (store/reading.py: no SQLAlchemy). Each takes a Reader or a Store.

A run's value of a metric is its first recorded row of that name, as `orch show` and `orch diff`
read it (Store.record).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from . import tags as tagging
from .metricjson import object_text
from .reader import CHUNK, columns, decoded, of
from .tables import SUCCEEDED

__all__ = ["CHUNK", "LISTED", "comparable_runs", "experiments", "hosts", "listed_lines", "listed_runs", "metric_names",
           "run_metrics", "run_patches", "status_counts"]

LISTED = ("id", "uid", "experiment", "variant", "host", "status", "username", "flags", "params", "started_at",
          "ended_at", "effective_params", "repeat")  # what the engine ran with (None: not from its log); repeat index
Listed = namedtuple("Listed", LISTED, defaults=(None, 0))  # type: ignore[misc]  # a listed run, with the Run's attribute names
ListedText = namedtuple("ListedText", (*LISTED, "metrics_json"))  # type: ignore[misc]  # and its metrics text


def experiments(source: Any) -> list[str]:
    return sorted(name for (name,) in of(source).rows("SELECT DISTINCT experiment FROM run"))


def metric_names(source: Any) -> list[str]:
    return sorted(name for (name,) in of(source).rows("SELECT DISTINCT name FROM metricrow"))


def hosts(source: Any) -> list[str]:
    return sorted(name for (name,) in of(source).rows("SELECT DISTINCT host FROM run"))


def status_counts(source: Any, experiment: str) -> dict[str, int]:
    found = of(source).rows("SELECT status, count(*) FROM run WHERE experiment = ? GROUP BY status", (experiment,))
    return {status: count for status, count in found}


def comparable_runs(source: Any, experiment: str) -> list[dict[str, Any]]:
    """The experiment's succeeded runs, oldest first: id, variant, host, params, spec, patches
    [(name, sha256 after)] and metrics {name: value}."""
    reader = of(source)
    # the status is matched here, not in SQL: a database without statistics (SQLite unanalyzed) would
    # search by the status index, every run of every experiment when most runs succeed (0.4 s at 100,000)
    found = reader.rows("SELECT id, status, variant, host, params, spec, effective_params FROM run "
                        "WHERE experiment = ? ORDER BY id", (experiment,))
    specs: dict[Any, Any] = {}  # SQLite's text of a spec -> its one decoded dict (an experiment's runs share it)

    def spec(value: Any) -> Any:
        if not isinstance(value, str):  # PostgreSQL decodes JSON itself
            return value or {}
        return specs[value] if value in specs else specs.setdefault(value, decoded("spec", value) or {})

    runs = [{"id": i, "variant": v, "host": h, "params": decoded("params", p) or {}, "spec": spec(s),
             "effective": decoded("effective_params", e)}
            for i, status, v, h, p, s, e in found if status == SUCCEEDED]
    ids = [r["id"] for r in runs]
    metrics, patches = run_metrics(reader, ids), run_patches(reader, ids)
    for r in runs:
        r["metrics"] = metrics.get(r["id"], {})
        r["patches"] = patches.get(r["id"], [])
    return runs


SCAN_AT = 20 * CHUNK  # runs from which one pass over every metric row beats a query per CHUNK of them


def run_metrics(source: Any, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each run's metrics, name -> value (the first row of each name). For many runs one pass over
    the table in the order written (100,000 runs' million rows: 1 s instead of 2 s by the run index)."""
    reader = of(source)
    found: dict[int, dict[str, Any]] = {}
    if len(run_ids) < SCAN_AT:
        sql = "SELECT run_id, name, value FROM metricrow WHERE run_id IN ({ids}) ORDER BY run_id, id"
        for run_id, name, value in reader.chunked(sql, run_ids):
            found.setdefault(run_id, {}).setdefault(name, value)
        return found
    wanted = set(run_ids)
    for run_id, name, value in reader.each("SELECT run_id, name, value FROM metricrow ORDER BY id"):
        own = found.get(run_id)
        if own is None:
            if run_id not in wanted:
                continue
            own = found[run_id] = {}
        if name not in own:
            own[name] = value
    return found


def run_patches(source: Any, run_ids: list[int]) -> dict[int, list[tuple[str, str]]]:
    found: dict[int, list[tuple[str, str]]] = {}
    sql = "SELECT run_id, name, sha256_after FROM patchrow WHERE run_id IN ({ids}) ORDER BY run_id, seq"
    for run_id, name, sha in of(source).chunked(sql, run_ids):
        found.setdefault(run_id, []).append((name, sha))
    return found


# A listed run's identity as `orch ls --json` writes it, made by SQLite (its json_object): the keys
# of api/listing.py's lines in their order; then the rest of its line after the identity's last
# field: params and effective params as stored, metrics as their stored text (store/metricjson.py; NULL:
# no metrics), then no tags: the few lines of tagged runs are given theirs here, as the listing writes them
HEAD = ("json_object('id', id, 'uid', uid, 'experiment', experiment, 'variant', variant, 'host', host, 'status', "
        "status, 'user', username, 'flags', json(flags), 'started_at', started_at, 'ended_at', ended_at)")
TAIL = """',"params":' || coalesce(params, 'null') || ',"effective_params":' || coalesce(effective_params, 'null')
          || ',"metrics":' || coalesce(metrics_json, '{}') || ',"tags":{}}'"""
NO_TAGS = ',"tags":{}}'  # how each line the database makes ends
Tags = Sequence[tuple[str, "str | None"]]  # `--tag` filters: (key, value), or (key, None) for any value


def listed_lines(source: Any, experiment: str | None = None, status: str | None = None, host: str | None = None,
                 user: str | None = None, limit: int | None = None, tags: Tags = ()) -> list[str] | None:
    """The runs listed_runs lists, oldest first, each as its `orch ls --json` line made whole by
    the database: its identity as one JSON object, params as stored, the stored metrics text, then
    its tags. One text per run, no metric row read (100,000 runs: 0.9 s instead of 2.5 s with the
    metric rows). None on PostgreSQL (its JSON objects are spelled otherwise: listed_runs with `metrics_text`)."""
    reader = of(source)
    if reader.kind != "sqlite":
        return None
    found = reader.rows(*_listing(f"id, rtrim({HEAD}, '}}') || {TAIL}", experiment, status, host, user, limit, tags))
    tagged = tagging.run_tags(reader, [run_id for run_id, _ in found])
    if not tagged:  # most listings: every line as the database made it (a splice per line cost 100,000 runs 0.3 s)
        return [line for _, line in reversed(found)]
    return [f'{line[:-len(NO_TAGS)]},"tags":{object_text(tagged[run_id])}}}' if run_id in tagged else line
            for run_id, line in reversed(found)]


def _listing(selected: str, experiment: str | None, status: str | None, host: str | None, user: str | None,
             limit: int | None, tags: Tags = ()) -> tuple[str, list[Any]]:
    """The query of the runs to list, newest first, and its values."""
    filters = [(column, value) for column, value in (("experiment", experiment), ("status", status), ("host", host),
                                                     ("username", user)) if value]
    tagged, tag_values = tagging.filter_sql(tags)
    where = " AND ".join([*(f'"{column}" = ?' for column, _ in filters), *tagged])
    sql = (f"SELECT {selected} FROM run" + (f" WHERE {where}" if where else "") + " ORDER BY id DESC"
           + (" LIMIT ?" if limit else ""))
    return sql, [value for _, value in filters] + tag_values + ([limit] if limit else [])


def listed_runs(source: Any, experiment: str | None = None, status: str | None = None, host: str | None = None,
                user: str | None = None, limit: int | None = None, decode: bool = True,
                metrics_text: bool = False, effective: bool = False, tags: Tags = ()) -> list[Any]:
    """Runs oldest first (the newest `limit` of them when given), filtered by experiment, status,
    host and the user who made them. Only the listed columns, as rows with the Run's attribute
    names: never a run's spec, env or launch script (100,000 runs: 1.6 s instead of 4.9 s for whole runs).
    Without `decode`, params stay as the database gives them: JSON text from SQLite, for output
    that writes them as JSON (decoding 100,000 runs' params costs a second). `metrics_text`: each
    with its stored metrics text too (`metrics_json`), for output that writes the metrics as JSON;
    `effective`: the engine's effective params decoded even without `decode` (`--where` matches them);
    `tags`: only runs with each of these tags (`orch ls --tag`)."""
    shape = ListedText if metrics_text else Listed
    found = of(source).rows(*_listing(columns(shape._fields), experiment, status, host, user, limit, tags))
    flags, params, ran = LISTED.index("flags"), LISTED.index("params"), LISTED.index("effective_params")
    rows = []
    for row in reversed(found):
        values = list(row)
        values[flags] = [] if values[flags] == "[]" else decoded("flags", values[flags])  # most runs have none
        if decode:
            values[params] = decoded("params", values[params])
        if decode or effective:
            values[ran] = decoded("effective_params", values[ran])
        rows.append(shape(*values))
    return rows
