"""A run's series as the store keeps it: packed blocks (`seriesblockrow`, schema 5: engines/seriesblock.py)
and, for runs recorded before, one row per point (`seriesrow`). Written as block rows; read back from
both, in the order the points were written: each node's kinds in the order they first came, each
kind's points by seq."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestrator.engines import seriesblock
from orchestrator.engines.seriesblock import SeriesBlock
from .reader import Reader, decoded, of

TABLE = "seriesblockrow"


def block_values(run_id: int, blocks: Iterable[SeriesBlock], node: int = 0) -> list[dict[str, Any]]:
    """Block rows' column values (of node `node` of a run over several hosts)."""
    return [{"run_id": run_id, "kind": b.kind, "seq": b.first, "points": len(b), "data": seriesblock.pack(b),
             "node": node} for b in blocks if len(b)]


def _ordered(found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows (id, run_id, node, kind, seq, data) in writing order: run, node, the kind's first row, seq."""
    first: dict[tuple[Any, Any, Any], int] = {}
    for row in sorted(found):
        first.setdefault((row[1], row[2], row[3]), row[0])
    return sorted(found, key=lambda r: (r[1], r[2], first[(r[1], r[2], r[3])], r[4]))


def _blocks(reader: Reader, sql: str, params: Iterable[Any]) -> list[tuple[int, SeriesBlock]]:
    rows = _ordered(reader.rows(sql, params))
    return [(run_id, seriesblock.unpack(kind, seq, bytes(data))) for _, run_id, _, kind, seq, data in rows]


def run_series(source: Any, run_id: int) -> list[dict[str, Any]]:
    """Every point of the run's series as `show --json` gives it: {"kind", "time", **values}."""
    reader = of(source)
    old = reader.rows('SELECT kind, time, "values" FROM seriesrow WHERE run_id = ? ORDER BY id', (run_id,))
    points = [{"kind": kind, "time": time, **decoded("values", values)} for kind, time, values in old]
    sql = f"SELECT id, run_id, node, kind, seq, data FROM {TABLE} WHERE run_id = ?"
    for _, block in _blocks(reader, sql, (run_id,)):
        points.extend({"kind": p.kind, "time": p.time, **p.values} for p in seriesblock.points(block))
    return points


def one_value(reader: Reader, ids: list[int], name: str) -> dict[int, list[dict[str, Any]]]:
    """run id -> {"kind", "time", name} of every block point that has the value `name` (the report's
    series: one column unpacked per block, no point made)."""
    found: dict[int, list[dict[str, Any]]] = {}
    sql = f"SELECT id, run_id, node, kind, seq, data FROM {TABLE} WHERE run_id IN ({{ids}})"
    for run_id, block in _chunked_blocks(reader, sql, ids):
        found.setdefault(run_id, []).extend({"kind": block.kind, "time": time, name: float(value)}  # as CAST(... AS FLOAT)
                                            for time, value in seriesblock.column_of(block, name)
                                            if isinstance(value, (int, float)) and not isinstance(value, bool))
    return found


def _chunked_blocks(reader: Reader, sql: str, ids: list[int]) -> list[tuple[int, SeriesBlock]]:
    rows = _ordered(list(reader.chunked(sql, ids)))
    return [(run_id, seriesblock.unpack(kind, seq, bytes(data))) for _, run_id, _, kind, seq, data in rows]
