"""What `orch ls` lists: runs filtered by experiment, status, host, user and params, sorted by a
metric, as a table, JSON (with params and metrics) or CSV."""

from __future__ import annotations

import csv
import io
import json
from json.encoder import encode_basestring_ascii  # the encoder's own, in C
from typing import Any

from orchestrator.core import compare as comparing
from orchestrator.core.tags import WHERE_PREFIX
from orchestrator.errors import SpecError
from orchestrator.store import metricjson


def check(store: Any, status: str | None, sort: str | None) -> None:
    from orchestrator.store import queries
    from orchestrator.store.reading import STATUSES

    if status is not None and status not in STATUSES:
        raise SpecError(f"--status {status!r} is not a run status; use one of {', '.join(STATUSES)}"
                        f"{comparing.did_you_mean(status, STATUSES)}")
    if sort is not None:
        known = queries.metric_names(store)
        if sort not in known:
            raise SpecError(f"--sort {sort}: no run has that metric{comparing.did_you_mean(sort, known)}; "
                            f"known: {', '.join(known) or 'none'}")


def select(store: Any, filters: dict[str, Any], where: dict[str, Any], sort: str | None,
           limit: int | None, as_text: bool = False) -> tuple[list[Any], dict[int, dict[str, Any]]]:
    """The runs to list (oldest first, or best first by `sort`) and their metrics by run id.
    Without `where` and `sort` the database applies the limit; with them every run of the other
    filters is read, then matched and sorted here, then cut to the limit. `as_text`: params may
    stay JSON text where `where` needs none of them (json_text writes them as they are)."""
    from orchestrator.store import queries

    rows = queries.listed_runs(store, limit=None if (where or sort) else limit, decode=bool(where) or not as_text,
                               effective=bool(where), **filters)
    if where:
        tagged = _tags(store, rows) if any(k.startswith(WHERE_PREFIX) for k in where) else {}
        views = [_view(r, tagged.get(r.id)) for r in rows]
        comparing.check_keys(where, {k for v in views for k in v}, "listed")
        rows = [r for r, v in zip(rows, views) if comparing.matches(v, where)]
    if not sort:
        rows = rows[-limit:] if limit and where else rows
        return rows, queries.run_metrics(store, [r.id for r in rows])
    metrics = queries.run_metrics(store, [r.id for r in rows])
    lower = comparing.lower_is_better(sort)

    def order(r: Any) -> tuple[int, float]:
        value = metrics.get(r.id, {}).get(sort)
        if not isinstance(value, (int, float)):
            return (1, 0.0)
        return (0, value if lower else -value)

    rows = sorted(rows, key=order)[:limit or None]
    return rows, metrics


def _view(r: Any, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """What `--where` matches: the params as the engine ran them (core/compare.py where_view), and
    the run's tags as `tag.KEY`."""
    found = comparing.where_view(r.variant, r.params or {}, r.effective_params)
    found.update({WHERE_PREFIX + k: v for k, v in (tags or {}).items()})
    return found


def _tags(store: Any, rows: list[Any]) -> dict[int, dict[str, str]]:
    from orchestrator.store import tags

    return tags.run_tags(store, [r.id for r in rows])


def json_text(rows: list[Any], metrics: dict[int, dict[str, Any]] | None,
              tags: dict[int, dict[str, str]] | None = None) -> str:
    """The listing as a JSON array of runs (identity, params, effective params, metrics), one run a line in compact
    form: each run stays one greppable line, and 100,000 runs print in a third of the time of
    indented JSON. Params held as JSON text (listed_runs without decode) are written as stored;
    `metrics` None: each run's stored metrics text (listed_runs with metrics_text). Each line is
    written field by field, as the encoder writes it (floats by repr, text ASCII-escaped): an
    encoder's pass over a dict per run cost 100,000 runs a second. `tags`: each run's tags by run id
    (store/tags.py run_tags), written last."""
    if not rows:
        return "[]\n"
    lines = []
    text = encode_basestring_ascii  # the columns the schema holds NOT NULL text
    for r in rows:
        params = r.params if isinstance(r.params, str) else _compact(r.params)
        ran = r.effective_params if isinstance(r.effective_params, str) else _value(r.effective_params)
        measured = (r.metrics_json or "{}") if metrics is None else _object(metrics.get(r.id))
        lines.append(f'{{"id":{r.id},"uid":{text(r.uid)},"experiment":{text(r.experiment)},'
                     f'"variant":{text(r.variant)},"host":{text(r.host)},"status":{text(r.status)},'
                     f'"user":{_value(r.username)},"flags":{_value(r.flags)},"started_at":{text(r.started_at)},'
                     f'"ended_at":{_value(r.ended_at)},"params":{params},"effective_params":{ran},"metrics":{measured},'
                     f'"tags":{_object((tags or {}).get(r.id))}}}')
    return "[\n" + ",\n".join(lines) + "\n]\n"


def json_listing(store: Any, filters: dict[str, Any], limit: int | None) -> str:
    """`json_text` of the runs `filters` and `limit` choose (no --where, no --sort), each run's
    line made by SQLite (queries.listed_lines: its identity, params as stored, the stored metrics
    text); on PostgreSQL written here, the metrics as their stored text. A line with other than
    plain ASCII text or with a backslash may hold an identity SQLite wrote otherwise than the
    encoder (UTF-8, its own escapes): its identity is written again here."""
    from orchestrator.store import queries

    lines = queries.listed_lines(store, limit=limit, **filters)
    if lines is None:
        from orchestrator.store import tags

        rows = queries.listed_runs(store, limit=limit, decode=False, metrics_text=True, **filters)
        return json_text(rows, None, tags.run_tags(store, [r.id for r in rows]))
    if not lines:
        return "[]\n"
    text = ",\n".join(lines)
    if not text.isascii() or "\\" in text:  # a pass over all of it: most listings have no such line
        text = ",\n".join(line if line.isascii() and "\\" not in line else _identity_again(line) for line in lines)
    return "[\n" + text + "\n]\n"


def _identity_again(line: str) -> str:
    """A line with its identity (what comes before its params) as the encoder writes it. The first
    `,"params":` of the line is its params' key: inside JSON text a quote that is not structural
    is escaped."""
    cut = line.index(',"params":')
    return _compact(json.loads(line[:cut] + "}"))[:-1] + line[cut:]


# the metrics text's own writing of every value (store/metricjson.py): a line is written as the text is made
_compact, _value, _object = metricjson.compact, metricjson.value_text, metricjson.object_text


def as_csv(rows: list[Any], metrics: dict[int, dict[str, Any]], tags: dict[int, dict[str, str]] | None = None) -> str:
    """One line per run: its identity, then a column per param, per metric and per tag (`tag.KEY`)
    any listed run has."""
    params = list(dict.fromkeys(k for r in rows for k in (r.params or {})))
    names = list(dict.fromkeys(k for r in rows for k in metrics.get(r.id, {})))
    tags = tags or {}
    keys = sorted({k for r in rows for k in tags.get(r.id, {})})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fixed = list(identity(rows[0])) if rows else ["id"]
    writer.writerow([*fixed, *params, *names, *(WHERE_PREFIX + k for k in keys)])
    for r in rows:
        own = metrics.get(r.id, {})
        values = identity(r)
        writer.writerow([*(_cell(values[k]) for k in fixed), *(_cell((r.params or {}).get(k)) for k in params),
                         *(_cell(own.get(k)) for k in names), *(tags.get(r.id, {}).get(k, "") for k in keys)])
    return out.getvalue()


def identity(r: Any) -> dict[str, Any]:
    return {"id": r.id, "uid": r.uid, "experiment": r.experiment, "variant": r.variant, "host": r.host,
            "status": r.status, "user": r.username, "flags": r.flags, "started_at": r.started_at,
            "ended_at": r.ended_at}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    return value
