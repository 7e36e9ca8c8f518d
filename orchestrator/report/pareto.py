"""The report's Pareto figure: output throughput against latency per configuration, and the front of
the configurations no other beats on both (faster and no slower to answer). It is the trade a
tuner picks on: the objective names one point, the front shows what each other choice costs.

The latency is the one the experiment's objective names (its metric or a constraint's), else the
first the runs record of the tail (p99) inter-token, end-to-end and first-token latency, then their
medians: at a fixed concurrency the median inter-token latency is throughput's inverse (no trade to
see), while a wider draft tree shows in the tail. Without any, accept length stands in (better
higher, as throughput).
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.core.compare import Group, Stat, lower_is_better
from orchestrator.core.objective import THROUGHPUT, metrics as objective_metrics
from orchestrator.engines.base import HEADLINE

from . import figures
from .data import Experiment

LATENCIES = ("itl_ms_p99", "e2e_ms_p99", "ttft_ms_p99", "itl_ms_p50", "e2e_ms_p50", "ttft_ms_p50")


def against(found: Experiment) -> str | None:
    """The metric the figure puts throughput against, or None when there is no figure to draw."""
    c = found.comparison
    if c is None or THROUGHPUT not in c.metrics:
        return None
    named = [m for m in objective_metrics(c.objective) if m != THROUGHPUT and lower_is_better(m) and m in c.metrics]
    recorded = [m for m in LATENCIES if m in c.metrics]
    return next(iter(named + recorded), HEADLINE if HEADLINE in c.metrics else None)


def figure(found: Experiment, x: str) -> tuple[figures.Figure, set[int]]:
    """The figure (one trace per configuration, named by its swept values; the front a dotted line
    and its points starred) and id() of each group on the front."""
    assert found.comparison is not None
    rows: list[tuple[Group, Stat, Stat]] = []
    for group in found.comparison.groups:
        along, throughput = group.stat(x), group.stat(THROUGHPUT)
        if along and throughput and math.isfinite(along.median + throughput.median):
            rows.append((group, along, throughput))
    lower = lower_is_better(x)
    front = pareto_front([(-a.median if lower else a.median, t.median) for _, a, t in rows])
    on_front = {id(rows[i][0]) for i in front}
    data = [_point(found, g, a, t, id(g) in on_front) for g, a, t in rows]
    data.append({"type": "scatter", "mode": "lines", "name": "Pareto front", "line": {"dash": "dot", "color": "#444"},
                 "x": [rows[i][1].median for i in front], "y": [rows[i][2].median for i in front], "hoverinfo": "skip"})
    better = "lower" if lower else "higher"
    tall = 420 + figures.legend_room([t["name"] for t in data])
    layout = figures.layout(f"{THROUGHPUT} against {x}: the Pareto front (★) of configurations no other beats on both",
                            f"{x} ({better} is better; median, bars: min–max of repeats)", THROUGHPUT,
                            legend=figures.legend_below(tall), height=tall)
    return {"data": data, "layout": layout}, on_front


def _point(found: Experiment, group: Group, along: Stat, throughput: Stat, on_front: bool) -> dict[str, Any]:
    label = figures.text(found.label(group))
    return {"type": "scatter", "mode": "markers", "name": f"{label}{' ★' if on_front else ''}",
            "x": [along.median], "y": [throughput.median], "error_x": figures.bars([along]),
            "error_y": figures.bars([throughput]),
            "marker": {"color": figures.colour(found, group), "size": 15 if on_front else 10,
                       "symbol": "star" if on_front else "circle", "line": {"width": 1, "color": "#222"}},
            "hovertemplate": f"{label}<br>%{{x}}, %{{y}}<extra></extra>"}


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the points no other point beats on both axes (both maximised), by x ascending."""
    front = [i for i, (x, y) in enumerate(points)
             if not any(ox >= x and oy >= y and (ox, oy) != (x, y) for ox, oy in points)]
    return sorted(front, key=lambda i: points[i])
