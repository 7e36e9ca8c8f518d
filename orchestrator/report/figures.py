"""The report's figures as Plotly figure specs: plain dicts turned into JSON, drawn by the inlined
plotly.js. No Python plotting objects are built (importing them would cost more than the report
takes to write).

Every text that comes from the database is HTML-escaped here: Plotly renders a subset of HTML in
names, labels and hover texts.
"""

from __future__ import annotations

import html
import math
from typing import Any

from orchestrator.core.compare import Group, Stat
from orchestrator.engines.base import HEADLINE

from .data import Experiment, RunData

THROUGHPUT = "output_tok_s"  # orch's own measure of a workload, whatever the engine
Figure = dict[str, Any]


def text(value: Any) -> str:
    return html.escape(str(value), quote=False)  # Plotly shows &lt; &gt; &amp; as the characters


def _layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": text(title)}, "xaxis": {"title": {"text": text(x)}, "automargin": True},
            "yaxis": {"title": {"text": text(y)}, "automargin": True}, "height": 420,
            "margin": {"t": 60, "l": 60, "r": 20, "b": 60}, **more}


def spread_by_config(found: Experiment, metric: str) -> Figure:
    """One box per configuration over its repeats, every repeat drawn as a point."""
    assert found.comparison is not None
    xs: list[str] = []
    ys: list[float] = []
    hover: list[str] = []
    for group in found.comparison.groups:
        rank, label = f"#{found.ranks[id(group)]}", text(found.label(group))
        for run in found.group_runs(group):
            if metric in run.metrics:
                xs.append(rank)
                ys.append(run.metrics[metric])
                hover.append(f"{label}: run {run.id} (repeat {run.record['repeat']})")
    trace = {"type": "box", "x": xs, "y": ys, "text": hover, "boxpoints": "all", "jitter": 0.3,
             "pointpos": 0, "name": text(metric), "hovertemplate": "%{y}<br>%{text}<extra></extra>"}
    return {"data": [trace], "layout": _layout(f"{metric} per configuration (box: the spread of repeats)",
                                               "configuration (rank in the table)", metric, showlegend=False)}


def metrics_by_param(runs: list[RunData], param: str, metrics: list[str]) -> Figure:
    """Each metric against one swept param: one panel per metric, stacked, sharing the x axis
    (a number line when every value is a number, else the values as categories in order)."""
    panels, gap = len(metrics), 0.04
    height = (1 - gap * (panels - 1)) / panels
    values = [r.record["params"].get(param) for r in runs]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    layout = _layout(f"metrics against {param}", param, "")
    layout.update(height=max(300, 170 * panels), showlegend=False)
    layout["xaxis"].update(anchor=f"y{panels if panels > 1 else ''}",
                           **({} if numeric else {"type": "category", "categoryorder": "category ascending"}))
    data = []
    for i, metric in enumerate(metrics):
        axis = "" if i == 0 else str(i + 1)
        points = [(v if numeric else text(v), r.metrics[metric], r.id) for v, r in zip(values, runs) if metric in r.metrics]
        data.append({"type": "scatter", "mode": "markers", "x": [p[0] for p in points], "y": [p[1] for p in points],
                     "text": [f"run {p[2]}" for p in points], "name": text(metric), "xaxis": "x",
                     "yaxis": f"y{axis}", "hovertemplate": "%{x}: %{y}<br>%{text}<extra></extra>"})
        top = 1 - i * (height + gap)
        layout[f"yaxis{axis}"] = {"title": {"text": text(metric)}, "domain": [top - height, top], "automargin": True}
    return {"data": data, "layout": layout}


def headline_over_time(runs: list[RunData]) -> Figure:
    """Accept length of each series point (decode log line) of each run, one line per run."""
    data = []
    for run in runs:
        points = run.headline_series()
        if points:
            data.append({"type": "scatter", "mode": "lines+markers", "x": [p[0] for p in points],
                         "y": [p[2] for p in points], "text": [text(p[1] or "") for p in points],
                         "name": text(f"run {run.id} {run.record['variant']}"),
                         "hovertemplate": "#%{x} %{text}: %{y}<extra>%{fullData.name}</extra>"})
    layout = _layout(f"{HEADLINE} over time per run", "log line (in order)", HEADLINE)
    if not data:  # a short workload's server may print no stats line with it
        layout["annotations"] = [{"text": f"no run's series carries {HEADLINE}: its server log printed no decode "
                                          "line with it", "showarrow": False, "xref": "paper", "yref": "paper",
                                  "x": 0.5, "y": 0.5}]
    return {"data": data, "layout": layout}


def pareto(found: Experiment) -> tuple[Figure, set[int]]:
    """Throughput against accept length per configuration (medians, min–max as error bars), the
    front of configurations no other beats on both; the ranks (from 1) of those on it."""
    assert found.comparison is not None
    rows: list[tuple[int, Group, Stat, Stat]] = []
    for rank, group in enumerate(found.comparison.groups, 1):
        accept, throughput = group.stat(HEADLINE), group.stat(THROUGHPUT)
        if accept and throughput and math.isfinite(accept.median + throughput.median):
            rows.append((rank, group, accept, throughput))
    points = [(a.median, t.median) for _, _, a, t in rows]
    front = pareto_front(points)
    everything = {
        "type": "scatter", "mode": "markers+text", "name": "configurations", "textposition": "top center",
        "x": [p[0] for p in points], "y": [p[1] for p in points], "text": [f"#{rank}" for rank, *_ in rows],
        "hovertext": [text(found.label(g)) for _, g, _, _ in rows], "hoverinfo": "text+x+y",
        "error_x": _bars([a for *_, a, _ in rows]), "error_y": _bars([t for *_, t in rows]),
    }
    line = {"type": "scatter", "mode": "lines", "name": "Pareto front", "line": {"dash": "dot"},
            "x": [points[i][0] for i in front], "y": [points[i][1] for i in front], "hoverinfo": "skip"}
    figure = {"data": [everything, line],
              "layout": _layout("throughput against accept length (medians; bars: min–max of repeats)",
                                HEADLINE, THROUGHPUT)}
    return figure, {rows[i][0] for i in front}


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the points no other point beats on both axes (both maximised), by x ascending."""
    front = [i for i, (x, y) in enumerate(points)
             if not any(ox >= x and oy >= y and (ox, oy) != (x, y) for ox, oy in points)]
    return sorted(front, key=lambda i: points[i])


def _bars(spreads: list[Stat]) -> dict[str, Any]:
    return {"type": "data", "symmetric": False, "array": [s.high - s.median for s in spreads],
            "arrayminus": [s.median - s.low for s in spreads]}
