"""`orch doctor SPEC|RUN`: from a low accept length to a named, confirmed cause (orchestrator/doctor)."""

from __future__ import annotations

from typing import Any

import typer

import orchestrator
from orchestrator.errors import EXIT_OK
from . import ui, waiting
from .app import _split, app, dumps, settings

_EXIT_NOT_CONFIRMED = 1


@app.command()
def doctor(
    target: str = typer.Argument(..., metavar="SPEC|RUN", help="Experiment file, or a recorded run (id, uid prefix, last)."),
    variant: str | None = typer.Option(None, "--variant", help="The variant to examine (needed when there are several)."),
    hosts: str | None = typer.Option(None, "--hosts", help="The host to examine it on (default: the experiment's first)."),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Probes alone: skip the checkpoint checks."),
    as_json: bool = typer.Option(False, "--json", help="{cause, evidence, fix, accept_len_before, accept_len_after, runs}."),
    wait: str | None = typer.Option(None, "--wait", metavar="[TIMEOUT]", help="Wait up to TIMEOUT seconds "
                                       "(alone: an hour) for a host or package tree another orch command holds."),
) -> None:
    """Probe a variant with low accept length, name its cause, run the fix and compare."""
    verdict = orchestrator.doctor(target, variant=variant, hosts=_split(hosts), no_preflight=no_preflight,
                                  wait=waiting.seconds(wait), inventory=settings.inventory, db=settings.db,
                                  report=None if as_json else ui.reporter)  # with --json, stdout is the JSON alone
    if as_json:
        ui.console.print(dumps(verdict.as_json()), markup=False, highlight=False, soft_wrap=True)
    else:
        ui.progress_done()
        for line in told(verdict):
            ui.console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(_EXIT_NOT_CONFIRMED if verdict.confirmed is False else EXIT_OK)


def told(verdict: Any) -> list[str]:
    """The verdict as lines: the cause and what it means, the evidence, the fix, before and after."""

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [f"cause: {verdict.cause} ({orchestrator.cause_meaning(verdict.cause)}); decided by {verdict.rule}"]
    lines += [f"  evidence: {line}" for line in verdict.evidence]
    if verdict.fix is not None:
        lines.append(f"fix: {verdict.fix.says}{'' if verdict.fix.runnable else ' (not run: no change of orch makes it)'}")
    confirmed = {True: "confirmed", False: "NOT confirmed", None: "no fix run"}[verdict.confirmed]
    lines.append(f"accept length before {number(verdict.accept_len_before)}, after {number(verdict.accept_len_after)}: "
                 f"{confirmed}")
    lines.append(f"probes run: {', '.join(dict.fromkeys(verdict.probes)) or 'none'}"
                 f"{'' if verdict.preflight else ' (no preflight)'}; runs: "
                 + ", ".join(f"{r['id']} ({r['variant']}, {r['status']})" for r in verdict.runs))
    return lines
