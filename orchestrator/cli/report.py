"""`orch report`: one self-contained HTML file about an experiment (orchestrator/report)."""

from __future__ import annotations

from pathlib import Path

import typer

from . import ui
from .app import _reader, app
from orchestrator.errors import SpecError


@app.command()
def report(
    experiment: str = typer.Argument(..., help="The experiment's name, as `orch ls` shows it."),
    out: Path = typer.Option(Path("report.html"), "-o", "--output", help="The HTML file to write."),
    by: str = typer.Option("", "--by", help="The metric that ranks configurations, under the experiment's constraints "
                           "(default: its `objective:`, else output_tok_s), as `orch compare --by`."),
) -> None:
    """An HTML report of an experiment's runs: the configurations compared (ranked by the
    experiment's objective), their spread over repeats, each metric against each swept param,
    accept length over time, the Pareto front of throughput and latency, and each run's patches,
    flags and debug lines, every configuration named by its swept values. One file that opens
    without a network."""
    from orchestrator import report as reports  # plotly.js is read only here: `orch --help` stays fast

    if out.is_dir() or not out.parent.is_dir():
        raise SpecError(f"-o {out}: not a file in an existing folder; give a path such as report.html")
    count = reports.write(_reader(), experiment, out, by.strip())
    ui.note(f"wrote {out}: {count} runs of {experiment}")
