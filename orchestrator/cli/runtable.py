"""The table `orch ls` prints: a row per run, its swept params and headline metrics as columns,
within the terminal's width.

What every listed run shares (its experiment, variant or host) is said once above the table
instead of in a column each; the params and metrics come from the listing (api/columns.py), the
params under their short labels (`speculative_num_steps` -> `steps`, cli/swept.py), as the live
table of `orch run` shows them; the tags where a listed run has any. Where the row is still wider
than the terminal, the columns worth the least room go first: the start time, the tags, the host,
variant and experiment, the repeat index, then the metrics and params from the last; the flags
come last, cut to the room left, or left out where that is too little to say anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import swept, tagged
from .text import fmt, line
from .ui import STATUS_STYLE

PADDING = 2  # a cell's, one space each side (rich's default)
FLAGS_LEAST = 8  # a flags column narrower than this says nothing: left out instead


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[Any], str]
    worth: int  # the column with the least goes first where the table is too wide


def show(console: Console, found: Any) -> None:
    """The runs of `found` (api.records.Listing) as a table no wider than `console`."""
    rows = found.rows
    columns = _columns(found)
    widths = {id(c): _natural(c, rows) for c in columns}
    while len(columns) > 2 and _width(columns, widths) > console.width:
        columns = _without_least(columns)
    console.print(_title(rows))
    console.print(_table(columns, rows, _flags_width(console.width - _width(columns, widths), rows)))


def _flags_width(room: int, rows: list[Any]) -> int | None:
    """The widest the flags column may be in the `room` the other columns leave (its padding and
    border taken off); None: no run has flags, or the room is too small to say anything."""
    widest = max((Text.from_markup(line(", ".join(r.flags))).cell_len for r in rows if r.flags), default=0)
    room -= PADDING + 1
    if not widest or room < min(FLAGS_LEAST, widest):
        return None
    return min(room, widest)


def _columns(found: Any) -> list[Column]:
    """Every column worth showing, in the order shown."""
    rows, metrics = found.rows, found.metrics
    columns = [Column("id", lambda r: str(r.id), 100)]
    for name, worth in (("experiment", 12), ("variant", 11), ("host", 10)):
        if len({getattr(r, name) for r in rows}) > 1:
            columns.append(Column(name, _attribute(name), worth))
    labels = swept.labels(found.swept)
    # a repeat index tells repeats apart, not configurations: it gives way before the metrics
    columns += [Column(line(labels[name]), _param(name), 20 if name == "repeat" else 60 - n)
                for n, name in enumerate(found.swept)]
    columns.append(Column("status", lambda r: f"[{STATUS_STYLE.get(r.status, '')}]{r.status}[/]", 99))
    columns += [Column(line(name), _metric(metrics, name), 40 - n) for n, name in enumerate(found.headline)]
    if found.tags:
        columns.append(Column("tags", lambda r: tagged.cell(found.tags.get(r.id)), 5))
    columns.append(Column("started", lambda r: line(r.started_at[:19].replace("T", " ")), 1))
    return columns


def _title(rows: list[Any]) -> str:
    """`3 runs of sweep, variant fixed, on a`: what each listed run shares."""
    said = [f"{len(rows)} run{'s' if len(rows) != 1 else ''}"]
    for name, how in (("experiment", "of {}"), ("variant", "variant {}"), ("host", "on {}")):
        values = {getattr(r, name) for r in rows}
        if len(values) == 1:
            said.append(how.format(line(values.pop())))
    return f"{said[0]} {', '.join(said[1:])}".strip()


def _without_least(columns: list[Column]) -> list[Column]:
    least = min(columns, key=lambda c: c.worth)
    return [c for c in columns if c is not least]


def _table(columns: list[Column], rows: list[Any], flags_width: int | None) -> Table:
    """The table of `rows`, with a flags column `flags_width` wide at most (None: without it)."""
    table = Table()
    for c in columns:
        table.add_column(c.header, no_wrap=True, overflow="ellipsis")
    if flags_width is not None:
        table.add_column("flags", no_wrap=True, overflow="ellipsis", max_width=flags_width)
    for r in rows:
        flags = [line(", ".join(r.flags or []))] if flags_width is not None else []
        table.add_row(*(c.cell(r) for c in columns), *flags)
    return table


def _natural(column: Column, rows: list[Any]) -> int:
    """The width of the column's widest cell (or its header), as the terminal shows it."""
    return max(Text.from_markup(text).cell_len for text in [column.header, *(column.cell(r) for r in rows)])


def _width(columns: list[Column], widths: dict[int, int]) -> int:
    """How wide the table of `columns` is drawn: each its widest cell and padding, and the borders
    between and around them (rich's default box)."""
    return sum(widths[id(c)] + PADDING for c in columns) + len(columns) + 1


def _attribute(name: str) -> Callable[[Any], str]:
    return lambda r: line(getattr(r, name))


def _param(name: str) -> Callable[[Any], str]:
    """A swept param's cell: its value, or the run's repeat index (api/columns.py REPEAT)."""
    if name == "repeat":
        return lambda r: line(fmt((r.params or {}).get(name, r.repeat)))
    return lambda r: line(fmt((r.params or {}).get(name)))


def _metric(metrics: dict[int, dict[str, Any]], name: str) -> Callable[[Any], str]:
    return lambda r: fmt(metrics.get(r.id, {}).get(name))
