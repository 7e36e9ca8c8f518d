"""The report's figures as Plotly figure specs: plain dicts turned into JSON, drawn by the inlined
plotly.js. No Python plotting objects are built (importing them would cost more than the report
takes to write).

Every figure speaks in params: a configuration is named by its swept values (`steps=3 topk=4`) on
each axis and in each legend, and keeps one colour in every figure. Every text that comes from the
database is HTML-escaped here: Plotly renders a subset of HTML in names, labels and hover texts.
"""

from __future__ import annotations

import html
import json
from typing import Any

from orchestrator.core.compare import Group, Stat, cell
from orchestrator.engines.base import HEADLINE

from .data import Experiment

Figure = dict[str, Any]
# Plotly's own first ten colours and their light forms, fixed here so a configuration keeps its
# colour across figures (twenty before one repeats)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")


def legend_room(names: list[str]) -> int:
    """Pixels the legend below a plot takes: a row per entry when the names are long (a wrapping
    legend puts one a row), else three a row; the figure grows by it, so the plot keeps its height."""
    per_row = 1 if max(map(len, names), default=0) > 45 else 3
    return 20 * -(-len(names) // per_row)


def legend_below(height: int) -> dict[str, Any]:
    """A legend under the plot, below its axis title, wrapping across the plot's width: long param
    labels do not squeeze the plot (`y` is a fraction of the plot area: a fixed gap in pixels)."""
    return {"orientation": "h", "yanchor": "top", "y": -115 / max(height - 120, 1), "x": 0, "font": {"size": 11}}


def text(value: Any) -> str:
    return html.escape(str(value), quote=False)  # Plotly shows &lt; &gt; &amp; as the characters


def colour(found: Experiment, group: Group) -> str:
    """The configuration's colour: by its rank, the same in every figure."""
    return PALETTE[(found.ranks[id(group)] - 1) % len(PALETTE)]


def layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": text(title)}, "xaxis": {"title": {"text": text(x)}, "automargin": True},
            "yaxis": {"title": {"text": text(y)}, "automargin": True}, "height": 440,
            "margin": {"t": 60, "l": 70, "r": 20, "b": 60}, **more}


def spread_by_config(found: Experiment, metric: str) -> Figure:
    """One horizontal box per configuration over its repeats, every repeat a point; the
    configurations down a categorical axis, best at the top, each named by its swept values on one
    line (a row each: twelve configurations of six params read as well as two of one)."""
    assert found.comparison is not None
    data = []
    for group in found.comparison.groups:
        runs = [r for r in found.group_runs(group) if metric in r.metrics]
        if not runs:
            continue
        data.append({"type": "box", "orientation": "h", "y": [text(found.tick(group))] * len(runs),
                     "x": [r.metrics[metric] for r in runs],
                     "text": [f"run {r.id} (repeat {r.record['repeat']})" for r in runs], "boxpoints": "all",
                     "jitter": 0.3, "pointpos": 0, "name": text(found.label(group)),
                     "marker": {"color": colour(found, group)},
                     "hovertemplate": "%{x}<br>%{text}<extra>%{fullData.name}</extra>"})
    by = found.comparison.by
    last = " (those failing a constraint last)" if found.comparison.objective.subject_to else ""
    cut = f"; params without {found.prefix}" if found.prefix else ""
    axis = layout(f"{metric} per configuration (box: the spread of repeats)", metric, "", showlegend=False,
                  height=140 + 30 * max(len(data), 3))
    axis["yaxis"].update(type="category", autorange="reversed", tickfont={"size": 11})
    axis["title"]["text"] += f"<br><sup>{text(f'configurations best first by {by}{last}{cut}')}</sup>"
    return {"data": data, "layout": axis}


def metrics_by_param(found: Experiment, param: str, metrics: list[str]) -> Figure:
    """Each metric against one swept param (its values as categories, in order), one line per
    combination of the other swept values (the legend names it), medians with min–max bars; one
    panel per metric, stacked, sharing the x axis."""
    assert found.comparison is not None
    others = split_by(found, param)
    panels, gap = len(metrics), 0.06
    height = (1 - gap * (panels - 1)) / panels
    groups = sorted(found.comparison.groups, key=lambda g: (found.label(g, only=others), _order(g.params.get(param))))
    values = sorted({_key(g, param) for g in groups}, key=lambda v: _order(json.loads(v)))
    lines = _lines(found, groups, others)
    tall = max(360, 230 * panels) + (legend_room(list(lines)) if others else 0)
    split = f"<br><sup>{text('one line per ' + ', '.join(others))}</sup>" if others else ""
    figure = layout(f"metrics against {param}", param, "", height=tall, showlegend=bool(others), legend=legend_below(tall))
    figure["title"]["text"] += split
    figure["xaxis"].update(type="category", categoryorder="array", categoryarray=[text(_tick(v)) for v in values],
                           anchor=f"y{panels if panels > 1 else ''}")
    data = []
    for i, metric in enumerate(metrics):
        axis = "" if i == 0 else str(i + 1)
        for n, (line, members) in enumerate(lines.items()):
            points = [(g, s) for g in members if (s := g.stat(metric)) is not None]
            if points:
                labels = [found.label(g) for g, _ in points]
                data.append(_line(line, PALETTE[n % len(PALETTE)], points, labels, param, metric, axis, i == 0))
        top = 1 - i * (height + gap)
        figure[f"yaxis{axis}"] = {"title": {"text": text(metric)}, "domain": [top - height, top], "automargin": True}
    return {"data": data, "layout": figure}


def split_by(found: Experiment, param: str) -> list[str]:
    """The other swept params that tell the lines apart. One is left out when the lines still hold
    one configuration per value without it: a param that moves with this one or with another (the
    draft tokens the engine ran, steps + 1; a variant that sets the algorithm) would otherwise make
    every line a single point."""
    assert found.comparison is not None
    others = [k for k in found.swept if k != param]
    for name in reversed(list(others)):
        rest = [k for k in others if k != name]
        points = [(found.label(g, only=rest), _key(g, param)) for g in found.comparison.groups]
        if len(set(points)) == len(points):
            others = rest
    return others


def _lines(found: Experiment, groups: list[Group], others: list[str]) -> dict[str, list[Group]]:
    """The configurations by the values of the other swept params: one line each."""
    lines: dict[str, list[Group]] = {}
    for g in groups:
        lines.setdefault(found.label(g, only=others) if others else "", []).append(g)
    return lines


def _line(line: str, color: str, points: list[tuple[Group, Stat]], labels: list[str], param: str, metric: str,
          axis: str, first: bool) -> dict[str, Any]:
    """One line of medians; a line is a combination of the other swept values, not a configuration,
    so its colour is its own (the legend of this figure)."""
    name = text(line) if line else text(metric)
    return {"type": "scatter", "mode": "lines+markers", "name": name, "legendgroup": name, "showlegend": first,
            "x": [text(_tick(_key(g, param))) for g, _ in points], "y": [s.median for _, s in points],
            "error_y": bars([s for _, s in points]), "marker": {"color": color, "size": 8}, "line": {"color": color},
            "text": [text(label) for label in labels], "xaxis": "x", "yaxis": f"y{axis}",
            "hovertemplate": f"{text(metric)} %{{y}}<br>%{{text}}<extra></extra>"}


def _key(group: Group, param: str) -> str:
    return json.dumps(cell(group, param), default=str)


def _tick(key: str) -> str:
    value = json.loads(key)
    return value if isinstance(value, str) else key


def _order(value: Any) -> tuple[int, float, str]:
    """Numbers by value, before texts by text: 2 before 10."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def headline_over_time(found: Experiment) -> Figure:
    """Accept length of each series point (decode log line) of each run, one line per run; the
    legend names each configuration once, its repeats in its colour."""
    data, named = [], set()
    for run in found.runs:
        points = run.headline_series()
        if not points:
            continue
        group = found.group_of.get(run.id)
        label = text(found.label(group) if group else f"{found.run_label(run)} ({run.record['status']})")
        data.append({"type": "scatter", "mode": "lines+markers", "x": [p[0] for p in points],
                     "y": [p[2] for p in points], "text": [text(p[1] or "") for p in points],
                     "name": label, "legendgroup": label, "showlegend": label not in named,
                     **({"line": {"color": colour(found, group)}} if group else {}),
                     "hovertemplate": f"run {run.id} #%{{x}} %{{text}}: %{{y}}<extra>%{{fullData.name}}</extra>"})
        named.add(label)
    tall = 400 + legend_room(list(named))
    figure = layout(f"{HEADLINE} over time, one line per run", "log line (in order)", HEADLINE, height=tall,
                    legend=legend_below(tall))
    if not data:  # a short workload's server may print no stats line with it
        figure["annotations"] = [{"text": f"no run's series carries {HEADLINE}: its server log printed no decode "
                                          "line with it", "showarrow": False, "xref": "paper", "yref": "paper",
                                  "x": 0.5, "y": 0.5}]
    return {"data": data, "layout": figure}


def bars(spreads: list[Stat]) -> dict[str, Any]:
    return {"type": "data", "symmetric": False, "array": [s.high - s.median for s in spreads],
            "arrayminus": [s.median - s.low for s in spreads]}

