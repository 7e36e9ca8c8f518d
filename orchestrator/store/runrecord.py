"""One run as the read path gives it (Store.get, Store.record and the reading commands): its row,
its children, its logs and its whole record, over a Reader or a Store (store/reader.py).
"""

from __future__ import annotations

import re
import zlib
from collections import namedtuple
from typing import Any

from orchestrator.errors import StoreError
from . import series, tags
from .reader import columns, decoded, of, shown
from .tables import RUN_COLUMNS

RunRow = namedtuple("RunRow", RUN_COLUMNS)  # type: ignore[misc]  # a run as Store.get returns it, as plain data


def get(source: Any, ref: str) -> RunRow:
    """A run by id (`12`), uid or unique uid prefix, `last`, or `last~N` (N runs before it): Store.get."""

    reader = of(source)
    select = f"SELECT {columns(RUN_COLUMNS)} FROM run"
    match = re.fullmatch(r"last(?:~(\d+))?", ref)
    if match:
        found = reader.rows(f"{select} ORDER BY id DESC LIMIT 1 OFFSET ?", (int(match.group(1) or 0),))
        if not found:
            raise StoreError(f"no run {ref!r} in {shown(reader.url)}: it holds fewer runs; see `orch ls`")
        return _run(found[0])
    if ref.isdigit() and int(ref) < 2**63:
        found = reader.rows(f"{select} WHERE id = ?", (int(ref),))
        if found:
            return _run(found[0])
    found = reader.rows(f"{select} WHERE uid LIKE ? || '%'", (ref,))  # as SQLAlchemy's startswith: _ and % match any
    if len(found) == 1:
        return _run(found[0])
    if len(found) > 1:
        raise StoreError(f"run {ref!r} is ambiguous ({len(found)} runs match); give more of the id")
    raise StoreError(f"no run {ref!r} in {shown(reader.url)}; see `orch ls` for run ids")


def _run(row: tuple[Any, ...]) -> RunRow:
    return RunRow(*(decoded(name, value) for name, value in zip(RUN_COLUMNS, row)))


def children(source: Any, run_id: int, table: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """One run's rows of a child table, in the order written, as {column: value}."""
    found = of(source).rows(f"SELECT {columns(names)} FROM {table} WHERE run_id = ? ORDER BY id", (run_id,))
    return [{n: decoded(n, v) for n, v in zip(names, row)} for row in found]


REQUEST_COLUMNS = ("seq", "at_s", "ttft_ms", "e2e_ms", "prompt_tokens", "completion_tokens", "accept_len", "itl_ms")


def requests(source: Any, run_id: int) -> list[dict[str, Any]]:
    """The run's workload requests in the order sent (`orch show --requests`)."""
    return children(source, run_id, "requestrow", REQUEST_COLUMNS)


def log(source: Any, run_id: int) -> bytes | None:
    found = of(source).rows("SELECT data FROM logrow WHERE run_id = ?", (run_id,))
    return zlib.decompress(found[0][0]) if found else None


def node_logs(source: Any, run_id: int) -> dict[int, tuple[str, bytes]]:
    """node rank -> (host, log) of each node of rank > 0 of a run over several hosts."""
    found = of(source).rows("SELECT node, host, data FROM nodelogrow WHERE run_id = ? ORDER BY node", (run_id,))
    return {int(node): (host, zlib.decompress(data)) for node, host, data in found}


def record(source: Any, run: RunRow) -> dict[str, Any]:
    """The whole run as plain data, exactly as Store.record gives it: what `show --json` prints and
    `diff` compares."""
    reader = of(source)

    def rows(table: str, *names: str) -> list[dict[str, Any]]:
        return children(reader, run.id, table, names)

    metrics: dict[str, Any] = {}
    sources: dict[str, list[dict[str, Any]]] = {}
    for m in rows("metricrow", "name", "value", "source", "note"):
        metrics.setdefault(m["name"], m["value"])
        sources.setdefault(m["name"], []).append({"value": m["value"], "source": m["source"], "note": m["note"]})
    checkpoint = ("name", "dest", "source_hash", "transforms", "result_hash", "manifest_hash", "files", "total_bytes",
                  "sent_files", "sent_bytes", "seconds")
    return {
        "id": run.id, "uid": run.uid, "experiment": run.experiment, "variant": run.variant, "host": run.host,
        "status": run.status, "user": run.username, "controller": run.controller,
        "server_run_id": run.server_run_id,  # the run that launched the server it used (server reuse)
        "flags": list(run.flags or []), "repeat": run.repeat, "params": run.params, "env": run.env,
        "effective_params": run.effective_params,  # the engine's own print of what it ran with
        "command": run.command,
        "patches": rows("patchrow", "name", "target", "file", "sha256_before", "sha256_after", "state"),
        "metrics": metrics,
        "metric_sources": sources,
        "histograms": {h.pop("name"): h for h in rows("histogramrow", "name", "counts", "source", "note")},
        "series": series.run_series(reader, run.id),
        "debug_lines": rows("debugrow", "text", "fields"),
        "events": rows("eventrow", "at", "kind", "message"),
        "checkpoints": rows("checkpointrow", *checkpoint),
        "preflight": [{**f, "allowed": bool(f["allowed"])}
                      for f in rows("findingrow", "severity", "code", "what", "why", "fix", "allowed")],
        "error": run.error, "diagnosis": run.diagnosis, "spec_path": run.spec_path, "started_at": run.started_at,
        "ended_at": run.ended_at,
        **tags.of_run(reader, run.id),  # tags, tag_authors, note: what people said of it after it ran
    }
