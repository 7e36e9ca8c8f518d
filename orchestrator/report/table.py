"""The report's configurations table: `orch compare`'s rows in HTML, narrow enough for a 1400-pixel
page. What is the same in every row (params, the repeat count, steady metrics) is one header line
above it, not a column; the table has the swept params, the ranking metric, accept length and the
headline measures; the other metrics follow in tables of a few columns each, folded.
Every value from the database is escaped with html.escape.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from orchestrator.core import compare as comparing, objective as objectives

from .data import Experiment

# The measures a tuner reads first (as `orch compare`'s table): after the objective's own metrics
HEADLINE = ("output_tok_s", "accept_len", "accept_rate", "ttft_ms_p50", "itl_ms_p50", "e2e_ms_p99", "startup_s")
PER_TABLE = 7  # metric columns a folded table holds: each column is about 110 pixels


def render(found: Experiment, front: set[int]) -> str:
    """The paragraph saying how rows rank, the header line, the table, the folded rest."""
    c = found.comparison
    assert c is not None
    shown, rest = columns(c)
    tables = [_table(found, front, shown, "configurations", marks=True)]
    for start in range(0, len(rest), PER_TABLE):
        tables.append(_table(found, front, rest[start:start + PER_TABLE], f"more-metrics-{start // PER_TABLE}"))
    folded = (f"<details><summary>{len(rest)} more metric(s): {escape(', '.join(rest))}</summary>"
              f"{''.join(tables[1:])}</details>") if rest else ""
    return "".join([_ranking(c), _header_line(c), tables[0], folded])


def columns(c: comparing.Comparison) -> tuple[list[str], list[str]]:
    """(the main table's metric columns, the rest): metrics with one value in every run are on the
    header line instead."""
    varying = [m for m in c.metrics if m not in c.steady]
    first = [m for m in dict.fromkeys((*objectives.metrics(c.objective), *HEADLINE)) if m in varying]
    return first, [m for m in varying if m not in first]


def _ranking(c: comparing.Comparison) -> str:
    constraints = ", ".join(map(str, c.objective.subject_to))
    subject = f", subject to {constraints} (on each configuration's medians)" if constraints else ""
    told = {"objective": "the experiment's objective", "--by": "--by"}.get(c.objective.source, "the default")
    return (f"<p>Succeeded runs by configuration, best first: {escape(c.objective.direction)} "
            f"<b>{escape(c.by)}</b>{escape(subject)} ({escape(told)}). Within noise: its min–max overlaps the "
            "best's. Cells: median, and the min–max of the repeats below it.</p>")


def _header_line(c: comparing.Comparison) -> str:
    """What every row shares, once: the constant params, the repeat count, the steady metrics, the
    runs left out."""
    counts = {len(g.run_ids) for g in c.groups}
    same = [f"{k} = {_show(v)}" for k, v in c.constant.items()]
    same += [f"n = {counts.pop()} runs per configuration"] if len(counts) == 1 else []
    same += [f"{k} = {v:.4g} (every run)" for k, v in c.steady.items()]
    left = [f"{n} {status}" for status, n in c.left_out.items()]
    return "".join([
        f'<p class="same">The same in every configuration: {escape("; ".join(same))}</p>' if same else "",
        f"<p>Not counted: {escape(', '.join(left))}</p>" if left else "",
    ])


def _table(found: Experiment, front: set[int], metrics: list[str], name: str, marks: bool = False) -> str:
    c = found.comparison
    assert c is not None
    several = len({len(g.run_ids) for g in c.groups}) > 1  # else n is on the header line
    fails = marks and bool(c.objective.subject_to)
    head = ["#", *(["mark"] if marks else []), *c.varying, *(["n"] if several else []), *(["runs"] if marks else []),
            *(["fails"] if fails else []), *metrics, *(["Pareto front"] if marks and front else [])]
    rows = []
    for rank, group in enumerate(c.groups, 1):
        cells = [escape(str(rank)), *([escape(group.mark)] if marks else []),
                 *(escape(_show(comparing.cell(group, k))) for k in c.varying),
                 *([escape(str(len(group.run_ids)))] if several else []),
                 *([escape(" ".join(map(str, group.run_ids)))] if marks else []),
                 *([escape("; ".join(group.failed))] if fails else []),
                 *(_stat(group.stat(m)) for m in metrics),
                 *(["★" if id(group) in front else ""] if marks and front else [])]
        css = ' class="best"' if group.mark == comparing.BEST else ' class="failed"' if group.failed else ""
        rows.append(f"<tr{css}>" + "".join(f"<td{_kind(head[i], c.varying)}>{cell}</td>"
                                           for i, cell in enumerate(cells)) + "</tr>")
    header = "<tr>" + "".join(f"<th>{_breakable(h)}</th>" for h in head) + "</tr>"
    return f'<table id="{escape(name)}">{header}{"".join(rows)}</table>'


def _kind(column: str, varying: list[str]) -> str:
    """Param values (any text, a path) may break anywhere, words between words; numbers never."""
    if column in varying or column == "fails":
        return ' class="text"'
    return ' class="words"' if column in ("mark", "runs") else ""


def _breakable(name: str) -> str:
    """A column's name that may break after each `_`: `speculative_num_draft_tokens` over four
    short lines instead of one column as wide as the name."""
    return escape(name).replace("_", "_<wbr>")


def _stat(s: comparing.Stat | None) -> str:
    if s is None:
        return ""
    spread = "" if s.low == s.high else f'<br><span class="spread">{_number(s.low, 3)}–{_number(s.high, 3)}</span>'
    return f"{_number(s.median, 4)}{spread}"


def _number(value: float, digits: int) -> str:
    """`digits` significant digits, but a number that large in full: 3322, never 3.32e+03."""
    return f"{value:.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def _show(value: Any) -> str:
    """A value as the experiment file writes it; an empty one (no patches) as `none`."""
    if value == "":
        return "none"
    return value if isinstance(value, str) else json.dumps(value, default=str)
