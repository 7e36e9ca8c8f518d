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

from orchestrator.core.objective import THROUGHPUT
from orchestrator.engines.base import HEADLINE

from . import figures, pareto, table
from .data import Experiment, RunData

# One column no wider than a 1400-pixel window: long texts (paths, debug lines) wrap, never widen the page
STYLE = """body{font-family:system-ui,sans-serif;margin:24px auto;padding:0 16px;max-width:1360px;color:#222}
*{box-sizing:border-box}table{border-collapse:collapse;margin:8px 0;max-width:100%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;font-size:13px;white-space:nowrap}th{white-space:normal}
td.text,details.run td{white-space:normal;overflow-wrap:anywhere}td.words{white-space:normal}th{background:#f3f3f3}td .spread{color:#777;font-size:11px}p.same{color:#444}
tr.best td{background:#e8f5e9}tr.failed td{color:#888}.figure{margin:16px 0;min-height:300px;width:100%}
details{margin:4px 0}summary{cursor:pointer;overflow-wrap:anywhere}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere}"""
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
        table.render(found, front) if c else "<p>No succeeded run with a numeric metric: nothing to compare.</p>",
        "<h2>Figures</h2>",
        *(f'<div class="figure" id="{escape(name)}"></div>' for name in specs),
        "<h2>Runs</h2>",
        *(_run_details(found, run) for run in found.runs),
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
    """The figures by element id, and id() of each configuration on the Pareto front."""
    specs: dict[str, figures.Figure] = {}
    front: set[int] = set()
    c = found.comparison
    if c:
        x = pareto.against(found)
        if x:
            specs["pareto"], front = pareto.figure(found, x)
        for metric in dict.fromkeys(m for m in (c.by, THROUGHPUT, HEADLINE) if m in c.metrics):
            specs[f"spread-{metric}"] = figures.spread_by_config(found, metric)
        shown, _ = table.columns(c)  # the table's metrics: the headline ones; a steady one is on its header line
        for param in (k for k in c.varying if k not in ("variant", "patches")):
            specs[f"by-{param}"] = figures.metrics_by_param(found, param, shown)
    specs["headline-over-time"] = figures.headline_over_time(found)
    return specs, front


def _plotly_js() -> str:
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")


def _script_json(data: Any) -> str:
    text = json.dumps(data, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _run_details(found: Experiment, run: RunData) -> str:
    r = run.record
    summary = f"run {r['id']}: {found.run_label(run)}, {r['variant']} on {r['host']}: {r['status']}"
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
        f"<p>tags: {escape('  '.join(f'{k}={v}' for k, v in r['tags'].items()))}</p>" if r.get("tags") else "",
        f"<p>note:</p><pre>{escape(r['note'])}</pre>" if r.get("note") else "",
        f"<details><summary>debug lines ({len(r['debug_lines'])})</summary><pre>{escape(debug)}</pre></details>",
        f"<p>error: {escape(r['error'])}</p>" if r.get("error") else "",
    ]
    return f'<details class="run"><summary>{escape(summary)}</summary>{"".join(parts)}</details>'


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
