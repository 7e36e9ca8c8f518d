"""`orch report`: one self-contained HTML file about an experiment (orchestrator/report)."""

from __future__ import annotations

from pathlib import Path

import typer

import orchestrator
from . import ui
from .app import app, settings


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
    count = orchestrator.write_report(experiment, out, db=settings.db, by=by)
    ui.note(f"wrote {out}: {count} runs of {experiment}")
