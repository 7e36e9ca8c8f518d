"""The table `orch ls` prints: a row per run, its swept params and headline metrics as columns,
within the terminal's width.

What every listed run shares (its experiment, variant or host) is said once above the table
instead of in a column each; the params and metrics come from the listing (api/columns.py), the
params under their short labels (`speculative_num_steps` -> `steps`, cli/swept.py), as the live
table of `orch run` shows them; the tags where a listed run has any. Where the row is still wider
than the terminal, the columns worth the least room go first: the start time, the tags, the host,
variant and experiment, then the metrics and params from the last; the flags come last, cut to
the room left, or left out where that is too little to say anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from . import swept, tagged
from .text import fmt, line
from .ui import STATUS_STYLE

UNBOUNDED = 10_000  # columns: room enough for any table, to measure it in
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
    while len(columns) > 2 and _width(console, _table(columns, rows, None)) > console.width:
        columns = _without_least(columns)
    console.print(_title(rows))
    console.print(_table(columns, rows, _flags_width(console, columns, rows)))


def _flags_width(console: Console, columns: list[Column], rows: list[Any]) -> int | None:
    """The widest the flags column may be in the room the other columns leave; None: no run has
    flags, or the room is too small to say anything."""
    widest = max((len(", ".join(r.flags)) for r in rows if r.flags), default=0)
    room = widest
    while room >= min(FLAGS_LEAST, widest) and room > 0:
        over = _width(console, _table(columns, rows, room)) - console.width
        if over <= 0:
            return room
        room -= over
    return None


def _columns(found: Any) -> list[Column]:
    """Every column worth showing, in the order shown."""
    rows, metrics = found.rows, found.metrics
    columns = [Column("id", lambda r: str(r.id), 100)]
    for name, worth in (("experiment", 12), ("variant", 11), ("host", 10)):
        if len({getattr(r, name) for r in rows}) > 1:
            columns.append(Column(name, _attribute(name), worth))
    labels = swept.labels(found.swept)
    columns += [Column(labels[name], _param(name), 60 - n) for n, name in enumerate(found.swept)]
    columns.append(Column("status", lambda r: f"[{STATUS_STYLE.get(r.status, '')}]{r.status}[/]", 99))
    columns += [Column(name, _metric(metrics, name), 40 - n) for n, name in enumerate(found.headline)]
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


def _width(console: Console, table: Table) -> int:
    """How wide `table` is drawn where it has all the room it wants (the console's own width would
    cap the measure: rich squeezes a table to fit, each cell cut to a letter or two)."""
    return Measurement.get(console, console.options.update(width=UNBOUNDED), table).maximum


def _attribute(name: str) -> Callable[[Any], str]:
    return lambda r: line(getattr(r, name))


def _param(name: str) -> Callable[[Any], str]:
    return lambda r: line(fmt((r.params or {}).get(name)))


def _metric(metrics: dict[int, dict[str, Any]], name: str) -> Callable[[Any], str]:
    return lambda r: fmt(metrics.get(r.id, {}).get(name))
