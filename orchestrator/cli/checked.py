"""`orch check`'s findings on the terminal: each finding once, with the points of the sweep it came
from said compactly (api/findings.py groups them).

The points a finding covers read as the sweep reads: `steps=3..5 x topk=1,4 (6 points)` where they
are every combination of those values, `all 6 points` where they are all checked, else a list
(`steps=3 topk=1; steps=5 topk=4`); the variant is named where the sweep has several, the hosts
where it ran on several."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.api import findings as grouping
from . import swept
from .text import fmt, line

if TYPE_CHECKING:  # `orch check --json` loads no rich
    from rich.console import Console

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "dim"}
LISTED = 6  # points listed one by one at most; then how many more


def show(console: Console, groups: list[dict[str, Any]]) -> None:
    """The findings of `check_experiment`'s groups, errors first, each once with its points."""
    every = grouping.points(groups)
    found = grouping.grouped(groups)
    hosts = list(dict.fromkeys(g["host"] for g in groups))
    checked = f"{len(every)} point{'s' if len(every) != 1 else ''}" if _swept(every) else _names(every)
    console.print(f"[bold]checked {line(checked)}[/] on {line(', '.join(hosts))}: "
                  + (f"{len(found)} finding(s)" if found else "[green]no findings[/]"))
    for f in found:
        style = SEVERITY_STYLE.get(f.severity, "")
        allowed = " [dim](allowed by the experiment)[/]" if f.allowed else ""
        console.print(f"  [{style}]{line(f.severity)}[/]{allowed} {line(f.what)}", soft_wrap=True)
        console.print(f"      [dim]why:[/] {line(f.why)}", soft_wrap=True)
        console.print(f"      [dim]fix:[/] {line(f.fix)}", soft_wrap=True)
        where = points_text(f.points, every)
        if len(hosts) > 1:
            where += f" on {', '.join(f.hosts)}"
        console.print(f"      [dim]in:[/] {line(where)}", soft_wrap=True)


def points_text(points: list[grouping.Point], every: list[grouping.Point]) -> str:
    """The points of a finding, among `every` point checked, as short as they can be said."""
    if not _swept(every):
        return _names(points)
    if len(points) == len(every) and len(every) > 1:
        return f"all {len(every)} points"
    keys = [k for k in _keys(every) if len({_cell(p, k) for p in every}) > 1]  # what tells points apart
    count = f"({len(points)} point{'s' if len(points) != 1 else ''})"
    labels = swept.labels(tuple(keys))  # `speculative_num_steps` -> `steps`, as the live table says it
    product = _product(points, every, keys, labels)
    if product is not None:
        return f"{product} {count}" if len(points) > 1 else product
    listed = [" ".join(f"{labels[k]}={_cell(p, k)}" for k in keys) for p in points[:LISTED]]
    more = f"; and {len(points) - LISTED} more" if len(points) > LISTED else ""
    return "; ".join(listed) + more + f" {count}"


def _swept(every: list[grouping.Point]) -> bool:
    """A sweep over a matrix, rather than variants alone (those read best by name)."""
    return any(p.values for p in every)


def _names(points: list[grouping.Point]) -> str:
    return ", ".join(dict.fromkeys(p.variant for p in points))


def _keys(every: list[grouping.Point]) -> list[str]:
    return ["variant", *dict.fromkeys(k for p in every for k in p.values)]


def _cell(point: grouping.Point, key: str) -> str:
    return point.variant if key == "variant" else fmt(point.values.get(key))


def _product(points: list[grouping.Point], every: list[grouping.Point], keys: list[str], labels: dict[str, str]
             ) -> str | None:
    """`steps=3..5 x topk=1,4` where `points` are every combination of their values (each key's
    in the order the sweep has them); else None."""
    held = {k: {_cell(p, k) for p in points} for k in keys}
    values = {k: [v for v in dict.fromkeys(_cell(p, k) for p in every) if v in held[k]] for k in keys}
    combinations = 1
    for listed in values.values():
        combinations *= len(listed)
    distinct = {tuple(_cell(p, k) for k in keys) for p in points}
    if combinations != len(distinct) or len(distinct) != len(points):
        return None
    return " x ".join(f"{labels[k]}={_values(listed)}" for k, listed in values.items())


def _values(listed: list[str]) -> str:
    """`3..5` for three or more whole numbers in a row, else `1,4`."""
    if len(listed) >= 3 and all(v.lstrip("-").isdigit() for v in listed):
        numbers = sorted(int(v) for v in listed)
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{numbers[0]}..{numbers[-1]}"
    return ",".join(listed)
