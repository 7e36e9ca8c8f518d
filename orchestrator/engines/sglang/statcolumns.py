"""SGLang stats lines -> series blocks directly (engines/seriesblock.py), with no record per line: the
layout regex of `stats.py` over a block of lines, each value column converted whole into a packed
array. The points are the ones `engine.series` makes of the records: the record's named values (None
where the layout prints no such field), the ranks that printed the line ("DP1 TP0"), then every other
number under its printed name.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from itertools import repeat

from orchestrator.engines.seriesblock import BLOCK_POINTS, FLOAT, INT, NO_INT, TEXT, Column, SeriesBlock, filled
from . import statarrays, stats
from .stats import BLOCK_LINES, DECODE

KINDS = {stats.DECODE: "decode", stats.PREFILL: "prefill"}  # the series kind of each header
_SKIPPED = ("time", "ranks", "extra", "graph")  # record fields that are no series value (ranks: as text)
_RANKS = "ranks"


def _fields(kind: stats._Kind) -> list[tuple[str, str]]:
    """(record field, column kind) of the series' named values, in the record's order."""
    kinds = {"iteration": INT, **{field: INT if convert is int else FLOAT for field, convert in kind.known.values()}}
    return [(name, kinds[name]) for name in kind.record._fields if name not in _SKIPPED]


def blocks(lines: list[bytes], header: str, first: int) -> Iterator[SeriesBlock]:
    """The `header` lines (bytes, in order) as series blocks, seq counted from `first`."""
    kind = stats._DECODE if header == DECODE else stats._PREFILL
    fast = _plain_blocks(lines, kind, KINDS[header], first)
    if fast is not None:
        yield from fast
        return
    made: list[SeriesBlock] = []
    for start in range(0, len(lines), BLOCK_LINES):
        block = _block(lines[start:start + BLOCK_LINES], kind, KINDS[header], first)
        first += len(block)
        if made and len(made[-1]) + len(block) <= BLOCK_POINTS and _same_columns(made[-1], block):
            made[-1] = _joined(made[-1], block)
        else:
            if made:
                yield made.pop()
            made.append(block)
    yield from made


def _plain_blocks(lines: list[bytes], kind: stats._Kind, series_kind: str, first: int) -> list[SeriesBlock] | None:
    """The blocks `blocks` makes of lines all in the first line's plain layout (`statarrays.py`):
    every BLOCK_LINES of them read alike, so joined into blocks of BLOCK_POINTS; None for others."""
    if not lines:
        return []
    layout = _plain_layout(lines[0], kind)
    rows = None if layout is None else statarrays.read(lines, kind, layout)
    return None if rows is None else _from_arrays(rows, layout, kind, series_kind, first)  # type: ignore[arg-type]


def plain_piece(piece: bytes, header: str, first: int) -> list[SeriesBlock] | None:
    """`blocks` of a piece of a log that is `header` lines alone in one plain layout, each ending
    with a newline (a busy server's log: every line a decode line); None for any other piece."""
    kind = stats._DECODE if header == DECODE else stats._PREFILL
    line = piece[:piece.find(b"\n")]
    layout = _plain_layout(line, kind) if header in line.decode("utf-8", "replace") else None
    rows = None if layout is None else statarrays.read_piece(piece, kind, layout)
    return None if rows is None else _from_arrays(rows, layout, kind, KINDS[header], first)  # type: ignore[arg-type]


def _plain_layout(line: bytes, kind: stats._Kind) -> stats._Layout | None:
    """The layout `_block` reads a block of this first line with, when it is read by one regex."""
    sample = line.decode("utf-8", "replace")
    return None if stats._parse_line(sample, kind) is None else stats._layout(kind, sample, True, True)


def _from_arrays(rows: statarrays.Rows, layout: stats._Layout, kind: stats._Kind, series_kind: str,
                 first: int) -> list[SeriesBlock]:
    """The blocks of BLOCK_POINTS points `_from_rows` makes of the same lines, BLOCK_LINES at a time."""
    shown = _ranks_text(rows.ranks) or None if rows.ranks else None
    made = []
    for start in range(0, len(rows.times), BLOCK_POINTS):
        end = min(start + BLOCK_POINTS, len(rows.times))
        named: dict[str, Column] = {}
        extras: list[Column] = []
        for (name, is_extra, convert), values in zip(layout.columns, rows.values):
            if values is None:
                continue  # the graph field
            part = array(FLOAT if is_extra or convert is float else INT, values[start:end].tobytes())
            if is_extra:
                extras.append(Column(name, FLOAT, part, optional=True))
            else:
                named[name] = Column(name, part.typecode, part)
        n = end - start
        columns = [named.get(name) or filled(name, typecode, n) for name, typecode in _fields(kind)]
        if shown is not None:
            columns.append(Column(_RANKS, TEXT, [shown] * n, optional=True))
        made.append(SeriesBlock(series_kind, first + start, rows.times[start:end], tuple(columns + extras)))
    return made


def _same_columns(a: SeriesBlock, b: SeriesBlock) -> bool:
    return [(c.name, c.kind, c.optional) for c in a.columns] == [(c.name, c.kind, c.optional) for c in b.columns]


def _joined(a: SeriesBlock, b: SeriesBlock) -> SeriesBlock:
    columns = tuple(Column(x.name, x.kind, x.values + y.values, x.optional)  # type: ignore[operator]
                    for x, y in zip(a.columns, b.columns))
    return SeriesBlock(a.kind, a.first, a.times + b.times, columns)


def _block(lines: list[bytes], kind: stats._Kind, series_kind: str, first: int) -> SeriesBlock:
    """Fast when every line has the first line's layout (one server prints one); else line by line."""
    sample = lines[0].decode("utf-8", "replace")
    if stats._parse_line(sample, kind) is not None:
        block = b"\n".join(lines)
        for own_prefix in (True, False):
            layout = stats._layout(kind, sample, True, own_prefix)
            rows = layout.regex.findall(block)
            if len(rows) == len(lines):
                try:
                    return _from_rows(rows, layout, kind, series_kind, first)
                except (ValueError, KeyError):  # a value that is not a number: take the lines one by one
                    break
    records = [r for r in map(stats._parse_line, (line.decode("utf-8", "replace") for line in lines), repeat(kind))
               if r is not None]
    return _from_records(records, kind, series_kind, first)


def _from_rows(rows: list[tuple[bytes, ...]], layout: stats._Layout, kind: stats._Kind, series_kind: str,
               first: int) -> SeriesBlock:
    n = len(rows)
    outer, inner, ranks, iterations, *values = zip(*rows)
    named: dict[str, Column] = {}
    extras: list[Column] = []
    for (name, is_extra, convert), column in zip(layout.columns, values):
        if is_extra:
            extras.append(Column(name, FLOAT, array(FLOAT, map(float, column)), optional=True))
        elif name != "graph":  # not a series value; a value neither True nor False still sends the block line by line
            typecode = INT if convert is int else FLOAT
            named[name] = Column(name, typecode, array(typecode, map(convert, column)))
        else:
            set(map(convert, set(column)))
    if any(iterations):
        named["iteration"] = Column("iteration", INT, array(INT, (int(i) if i else NO_INT for i in iterations)))
    columns = [named.get(name) or filled(name, typecode, n) for name, typecode in _fields(kind)]
    if any(ranks):
        shown = {text: _ranks_text(text) or None for text in set(ranks)}
        columns.append(Column(_RANKS, TEXT, list(map(shown.__getitem__, ranks)), optional=True))
    return SeriesBlock(series_kind, first, _times(inner, outer), tuple(columns + extras))


def _ranks_text(text: bytes) -> str:
    """b" DP1 TP0" -> "DP1 TP0", as the record's ranks (a dict) print in `engine.series`."""
    return " ".join(f"{name}{number}" for name, number in dict(stats._rank_pairs(text)).items())


def _times(inner: tuple[bytes, ...], outer: tuple[bytes, ...]) -> list[str | None]:
    """Each row's time (`stats._times`); when every row has SGLang's own, decoded in one piece."""
    if all(inner):
        return b"\n".join(inner).decode().split("\n")
    return list(stats._times(inner, outer))


def _from_records(records: list, kind: stats._Kind, series_kind: str, first: int) -> SeriesBlock:
    """The block of records parsed one line at a time (lines printed in more than one layout)."""
    columns = []
    for name, typecode in _fields(kind):
        none = NO_INT if typecode == INT else float("nan")
        columns.append(Column(name, typecode, array(typecode, [none if v is None else v
                                                                for v in (getattr(r, name) for r in records)])))
    texts = [" ".join(f"{k}{v}" for k, v in r.ranks.items()) or None for r in records]
    if any(texts):
        columns.append(Column(_RANKS, TEXT, texts, optional=True))
    extra_names = list(dict.fromkeys(name for r in records for name in r.extra))
    for name in extra_names:
        columns.append(Column(name, FLOAT, array(FLOAT, [r.extra.get(name, float("nan")) for r in records]), optional=True))
    return SeriesBlock(series_kind, first, [r.time for r in records], tuple(columns))
