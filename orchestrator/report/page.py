"""The report's HTML: one file with plotly.js inlined, the figures' specs as one JSON block, the
comparison table and each run's details. Every value read from the database is data: escaped with
html.escape in the markup, and JSON in the script block has `<`, `>` and `&` as \\u escapes so no
text can close the block.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from orchestrator.core import compare as comparing
from orchestrator.engines.base import HEADLINE

from . import figures
from .data import Experiment, RunData

STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}th{background:#f3f3f3}
tr.best td{background:#e8f5e9}.figure{margin:16px 0;min-height:300px}
details{margin:4px 0}summary{cursor:pointer}pre{background:#f7f7f7;padding:6px;white-space:pre-wrap}"""
DRAW = """for (const [id, fig] of Object.entries(JSON.parse(document.getElementById('figures').textContent))) {
  Plotly.newPlot(id, fig.data, fig.layout, {responsive: true, displaylogo: false});
}"""


def render(found: Experiment) -> str:
    specs, front = _figures(found)
    c = found.comparison
    body = [
        f"<h1>{escape(found.name)}: {len(found.runs)} runs"
        f"{f', {len(c.groups)} configurations' if c else ''}</h1>",
        "<h2>Configurations</h2>",
        _comparison(found, front) if c else "<p>No succeeded run with a numeric metric: nothing to compare.</p>",
        "<h2>Figures</h2>",
        *(f'<div class="figure" id="{escape(name)}"></div>' for name in specs),
        "<h2>Runs</h2>",
        *(_run_details(run) for run in found.runs),
    ]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(found.name)}: orch report</title><style>{STYLE}</style>",
        f"<script>{_plotly_js()}</script></head><body>",
        *body,
        f'<script type="application/json" id="figures">{_script_json(specs)}</script>',
        f"<script>{DRAW}</script>", "</body></html>",
    ])


def _figures(found: Experiment) -> tuple[dict[str, figures.Figure], set[int]]:
    """The figures by element id, and the ranks of the configurations on the Pareto front."""
    specs: dict[str, figures.Figure] = {}
    front: set[int] = set()
    c = found.comparison
    if c:
        for metric in (m for m in (HEADLINE, figures.THROUGHPUT) if m in c.metrics):
            specs[f"spread-{metric}"] = figures.spread_by_config(found, metric)
        compared = [r for g in c.groups for r in found.group_runs(g)]
        varying_metrics = [m for m in c.metrics if m not in c.steady]  # a steady one is listed above the table
        for param in (k for k in c.varying if k not in ("variant", "patches")):
            specs[f"by-{param}"] = figures.metrics_by_param(compared, param, varying_metrics)
    specs["headline-over-time"] = figures.headline_over_time(found.runs)
    if c and {HEADLINE, figures.THROUGHPUT} <= set(c.metrics):
        specs["pareto"], front = figures.pareto(found)
    return specs, front


def _plotly_js() -> str:
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


def _script_json(data: Any) -> str:
    text = json.dumps(data, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _comparison(found: Experiment, front: set[int]) -> str:
    """`orch compare`'s table: the params the same everywhere above it, one row per configuration,
    best first by the comparison's metric; plus whether a row is on the Pareto front."""
    c = found.comparison
    assert c is not None
    same = [f"{k} = {_show(v)}" for k, v in c.constant.items()] + [f"{k} = {v:.4g} (every run)" for k, v in c.steady.items()]
    left = [f"{n} {status}" for status, n in c.left_out.items()]
    head = ["#", "mark", *c.varying, "n", "runs", *c.metrics, "Pareto front"]
    rows = []
    for rank, group in enumerate(c.groups, 1):
        cells = [str(rank), group.mark, *(_show(comparing.cell(group, k)) for k in c.varying),
                 str(len(group.run_ids)), " ".join(map(str, group.run_ids))]
        cells += [_stat(group.stat(m)) for m in c.metrics]
        cells.append("on the front" if rank in front else "")
        css = ' class="best"' if group.mark == comparing.BEST else ""
        rows.append(f"<tr{css}>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
    return "".join([
        f"<p>Succeeded runs by configuration, best first by {escape(c.by)} "
        f"({'lower' if comparing.lower_is_better(c.by) else 'higher'} is better); "
        f"within noise: its min–max overlaps the best's. Cells: median (min–max, n).</p>",
        f"<p>The same in every run: {escape('; '.join(same))}</p>" if same else "",
        f"<p>Not counted: {escape(', '.join(left))}</p>" if left else "",
        f'<table id="configurations">{header}{"".join(rows)}</table>',
    ])


def _stat(s: comparing.Stat | None) -> str:
    return "" if s is None else f"{s.median:.4g} ({s.low:.4g}–{s.high:.4g}, n={s.n})"


def _run_details(run: RunData) -> str:
    r = run.record
    summary = f"run {r['id']} {r['variant']} on {r['host']}: {r['status']}"
    params = "".join(f"<tr><td>{escape(k)}</td><td>{escape(_show(v))}</td></tr>" for k, v in sorted(r["params"].items()))
    patches = "".join(f"<tr><td>{escape(p['name'])}</td><td>{escape(p['target'])}</td><td>{escape(p['state'])}</td>"
                      f"<td>{escape(p['sha256_after'][:12])}</td></tr>" for p in r["patches"])
    metrics = "".join(f"<tr><td>{escape(k)}</td><td>{escape(_show(v))}</td></tr>" for k, v in sorted(r["metrics"].items()))
    debug = "\n".join(d["text"] for d in r["debug_lines"])
    parts = [
        f"<p>uid {escape(r['uid'])}, repeat {escape(_show(r['repeat']))}, started {escape(_show(r['started_at']))}</p>",
        f"<table><tr><th>param</th><th>value</th></tr>{params}</table>",
        f"<table><tr><th>metric</th><th>value</th></tr>{metrics}</table>",
        f"<table><tr><th>patch</th><th>target</th><th>state</th><th>sha256 after</th></tr>{patches}</table>"
        if patches else "<p>no patches</p>",
        f"<p>flags: {escape(' '.join(map(str, r['flags'])) or 'none')}</p>",
        f"<details><summary>debug lines ({len(r['debug_lines'])})</summary><pre>{escape(debug)}</pre></details>",
        f"<p>error: {escape(r['error'])}</p>" if r.get("error") else "",
    ]
    return f'<details class="run"><summary>{escape(summary)}</summary>{"".join(parts)}</details>'


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
