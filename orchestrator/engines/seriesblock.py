"""A block of a log's series: up to BLOCK_POINTS consecutive points of one kind as columns, and the
bytes the store keeps of it.

A long run's log holds millions of stats lines. One row and one JSON object per point cost the
import most of its time and the store most of its space; a block keeps each value column as one
packed array (floats as doubles, whole numbers as 64-bit integers, text as lines), so writing and
reading a million points are a few array copies, not a million rows. `points` gives back the
points exactly as `SeriesPoint`s held them: the same keys in the same order, None where a line
printed no value.
"""

from __future__ import annotations

import json
import math
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, Union

from orchestrator.records import SeriesPoint

BLOCK_POINTS = 1 << 16  # points per stored block: a block unpacks in milliseconds
FLOAT, INT, TEXT, JSON = "d", "q", "t", "j"  # a column's kind: array typecodes, text, other values as JSON
NO_INT = -(2**63)  # the whole-number column's "no value"
NO_TEXT = "\x00"  # the text column's "no value" (never printed in a log line)

Values = Union["array[float]", "array[int]", list]


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # FLOAT, INT or TEXT
    values: Values  # FLOAT: NaN where no value; INT: NO_INT; TEXT: str (one line), or None; JSON: its text, or None
    optional: bool = False  # a point without a value lacks the key (a field only some lines print)


@dataclass(frozen=True)
class SeriesBlock:
    kind: str  # "decode", "prefill", ...
    first: int  # the seq of its first point
    times: list[str | None]
    columns: tuple[Column, ...]

    def __len__(self) -> int:
        return len(self.times)


def _none_of(kind: str) -> object:
    return math.nan if kind == FLOAT else NO_INT if kind == INT else None


def filled(name: str, kind: str, n: int, optional: bool = False) -> Column:
    """A column of n points without a value (a field this layout of line does not print)."""
    return Column(name, kind, array(kind, [_none_of(kind)]) * n if kind in (FLOAT, INT) else [None] * n, optional)  # type: ignore[list-item]


# ---- the stored bytes --------------------------------------------------------------------------

def pack(block: SeriesBlock) -> bytes:
    """The block as the store keeps it: a JSON header line naming the columns, then each column's
    bytes, all zlib-compressed at its fastest level. Columns are kept in fewer bytes where that
    gives back the same values (engines/compactcolumns.py: narrow whole numbers, decimals as
    scaled whole numbers, text as its runs); the header says how ("times" and a column's fourth
    entry): a block without them is read as before."""
    from . import compactcolumns

    parts: list[bytes] = []
    header: dict[str, Any] = {"n": len(block)}
    time_runs = compactcolumns.runs(block.times)
    if time_runs is None:
        parts.append(_text_bytes(block.times))
    else:
        header["times"] = "runs"
        parts += [_text_bytes(time_runs[0]), time_runs[1].tobytes()]
    columns = []
    for column in block.columns:
        entry: list[Any] = [column.name, column.kind, column.optional]
        if column.kind in (TEXT, JSON):
            found = compactcolumns.runs(column.values)
            if found is None:
                parts.append(_text_bytes(column.values))
            else:
                entry.append({"runs": len(found[0])})
                parts += [_text_bytes(found[0]), found[1].tobytes()]
        else:
            compact = (compactcolumns.narrow_ints if column.kind == INT else compactcolumns.scaled_floats)(column.values)  # type: ignore[arg-type]
            if compact is None:
                parts.append(column.values.tobytes())  # type: ignore[union-attr]
            else:
                entry.append(compact[1])
                parts.append(compact[0])
        columns.append(entry)
    header.update(sizes=[len(p) for p in parts], columns=columns)
    return zlib.compress(json.dumps(header).encode() + b"\n" + b"".join(parts), 1)


def unpack(kind: str, first: int, data: bytes) -> SeriesBlock:
    from . import compactcolumns

    raw = zlib.decompress(data)
    end = raw.index(b"\n")
    header = json.loads(raw[:end])
    n = header["n"]
    at, sizes = end + 1, iter(header["sizes"])

    def part() -> bytes:
        nonlocal at
        size = next(sizes)
        at += size
        return raw[at - size:at]

    if header.get("times") == "runs":
        times = compactcolumns.from_runs(_text_values(part(), 1), part())
    else:
        times = _text_values(part(), n)
    columns = []
    for name, column_kind, optional, *how in header["columns"]:
        values: Values
        if column_kind in (TEXT, JSON):
            values = compactcolumns.from_runs(_text_values(part(), 1), part()) if how else _text_values(part(), n)
        elif how:
            values = compactcolumns.widened(part(), how[0])
        else:
            values = array(column_kind)
            values.frombytes(part())
        columns.append(Column(name, column_kind, values, optional))
    return SeriesBlock(kind, first, times, tuple(columns))


def _text_bytes(values: Sequence[str | None]) -> bytes:
    if None not in values:
        return "\n".join(values).encode()  # type: ignore[arg-type]
    return "\n".join(NO_TEXT if v is None else v for v in values).encode()


def _text_values(data: bytes, n: int) -> list[str | None]:
    if not n:
        return []
    return [None if v == NO_TEXT else v for v in data.decode().split("\n")]


# ---- points --------------------------------------------------------------------------------------

def plain(column: Column) -> list[object]:
    """The column's values as Python values, None where a point has none."""
    if column.kind == FLOAT:
        return [None if v != v else v for v in column.values]  # NaN is the one value unequal to itself
    if column.kind == INT:
        return [None if v == NO_INT else v for v in column.values]
    if column.kind == JSON:
        return [None if v is None else json.loads(v) for v in column.values]
    return list(column.values)


def points(block: SeriesBlock) -> Iterator[SeriesPoint]:
    """The block's points, each with its columns' values by name in column order (an optional
    column's key only where the point has a value)."""
    names = [c.name for c in block.columns]
    rows = zip(*(plain(c) for c in block.columns)) if block.columns else repeat((), len(block))
    optional = [c.optional for c in block.columns]
    anything_optional = any(optional)
    for i, (time, row) in enumerate(zip(block.times, rows)):
        if anything_optional:
            values = {n: v for n, v, o in zip(names, row, optional) if v is not None or not o}
        else:
            values = dict(zip(names, row))
        yield SeriesPoint(block.kind, block.first + i, time, values)


def column_of(block: SeriesBlock, name: str) -> list[tuple[str | None, object]]:
    """(time, value) of every point of the block that has a value `name`: one column read, no point made."""
    for column in block.columns:
        if column.name == name:
            values = plain(column)
            present = [v is not None for v in values]
            return list(zip(compress(block.times, present), compress(values, present)))
    return []


def from_points(points: Sequence[SeriesPoint]) -> list[SeriesBlock]:
    """Blocks of points made one at a time (a run's collected log, a vLLM log): each kind's points
    in runs of BLOCK_POINTS, a column per value name (its kind from its values: whole numbers,
    other numbers, or text)."""
    blocks: list[SeriesBlock] = []
    by_kind: dict[str, list[SeriesPoint]] = {}
    for point in points:
        by_kind.setdefault(point.kind, []).append(point)
    for kind, found in by_kind.items():
        for start in range(0, len(found), BLOCK_POINTS):
            part = found[start:start + BLOCK_POINTS]
            blocks.append(_block_of(kind, part))
    return blocks


def _block_of(kind: str, part: list[SeriesPoint]) -> SeriesBlock:
    names: dict[str, None] = {}
    for point in part:
        names.update(dict.fromkeys(point.values))
    columns = []
    for name in names:
        values = [p.values.get(name) for p in part]
        everywhere = all(name in p.values for p in part)
        columns.append(_column(name, values, optional=not everywhere))
    return SeriesBlock(kind, part[0].seq, [p.time for p in part], tuple(columns))


def _column(name: str, values: list[object], optional: bool) -> Column:
    """The column of one value name, of the kind all its values share (bool is no whole number)."""
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int} and all(NO_INT < v < 2**63 for v in values if v is not None):  # type: ignore[operator]
        return Column(name, INT, array(INT, [NO_INT if v is None else v for v in values]), optional)  # type: ignore[misc]
    if kinds == {float} and all(v == v for v in values if v is not None):  # NaN would read back as no value
        return Column(name, FLOAT, array(FLOAT, [math.nan if v is None else v for v in values]), optional)  # type: ignore[misc]
    if kinds <= {str} and not any("\n" in v or v == NO_TEXT for v in values if isinstance(v, str)):
        return Column(name, TEXT, list(values), optional)
    return Column(name, JSON, [None if v is None else json.dumps(v) for v in values], optional)
