"""`orch run` and `orch render`: an experiment's runs, made or only rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

import orchestrator
from . import swept, ui, waiting
from .text import visible
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_HOST, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED
from .app import SET_HELP, _split, app, settings


@app.command()
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: str | None = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    variants: list[str] = typer.Option([], "--variant", help="Run only these variants (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Render and check everything; change nothing."),
    resume: bool = typer.Option(False, "--resume", help="Skip plans (variant, matrix point, repeat) that have a "
                                "succeeded run in this experiment with the same fingerprint."),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Skip the checkpoint checks (recorded with each run)."),
    allow_busy_gpus: bool = typer.Option(False, "--allow-busy-gpus",
                                         help="Run even where another process holds the run's GPUs (recorded with each run)."),
    accept_drift: bool = typer.Option(False, "--accept-drift", help="Patch a file changed by hand since orch left it "
                                      "as it is now (the change recorded with the run) instead of stopping."),
    wait: str | None = typer.Option(None, "--wait", metavar="[TIMEOUT]", help="Wait up to TIMEOUT seconds "
                                       "(alone: an hour) for a host or package tree another orch command holds, "
                                       "instead of refusing it."),
) -> None:
    """Run an experiment: every variant x matrix x repeat, patches reverted after each run."""
    sweep = orchestrator.plan_runs(spec_path, inventory=settings.inventory, db=settings.db, hosts=_split(hosts),
                                   overrides=overrides, variants=variants, dry_run=dry_run, resume=resume,
                                   no_preflight=no_preflight, allow_busy_gpus=allow_busy_gpus,
                                   accept_drift=accept_drift, wait=waiting.seconds(wait))
    plans, store = sweep.plans, sweep.store
    for decision in sweep.decisions:  # --resume: why each plan runs or is skipped
        ui.console.print(visible(decision.line), markup=False)
    if resume and not plans:
        ui.console.print("every plan already has a succeeded run with the same fingerprint; nothing to do")
        raise typer.Exit(EXIT_OK)
    from . import interrupt

    ui.reporter.expect(plans)  # the live table's columns: the params that tell the plans apart
    done, why = interrupt.run(sweep.run_async(ui.reporter), sweep)
    if why is not None:  # every host cleaned up: what each did, the runs, exit 130
        outcomes, unstarted = sweep.interrupted(ui.progress)
        ui.summary(outcomes, sweep.metrics, ui.matrix_params(plans, outcomes, store))
        for said in swept.unstarted_lines(unstarted, swept.names(plans), f"interrupted by {why}"):
            ui.console.print(visible(said), markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    outcomes = done or []
    if not dry_run:
        ui.summary(outcomes, sweep.metrics, ui.matrix_params(plans, outcomes, store))
        # a plan that never became a run (its host refused, or could not be reached) is shown by
        # nothing else: its error, once per reason, on a line of its own below the table
        ui.not_run(outcomes)
    else:  # no runs, so no table: each error on its own line, once (the experiment's own error is every plan's)
        ui.progress_done()
        for error in dict.fromkeys(o.error for o in outcomes if o.error):
            ui.error(error)
        ui.console.print(_dry_run_summary(outcomes), markup=False, soft_wrap=True)
    # a host that left the sweep is exit 3 even when the others ran all its plans (each said as it
    # left); one that left over a bad input of its own (a missing identity file) says so: exit 2
    codes = [o.exit_code for o in outcomes] + [e.exit_code for e in sweep.departed.values()]
    raise typer.Exit(max(codes, default=EXIT_OK, key=_severity))


def _dry_run_summary(outcomes: list[Any]) -> str:
    """`dry run: 6 plan(s) on local: 6 would run, 0 would not; nothing changed, nothing recorded`."""
    hosts = ", ".join(dict.fromkeys(o.host for o in outcomes if o.host != "-")) or "no host"
    failed = sum(1 for o in outcomes if o.error)
    return (f"dry run: {len(outcomes)} plan(s) on {visible(hosts)}: {len(outcomes) - failed} would run, {failed} would "
            f"not{' (the errors above)' if failed else ''}; nothing changed on any host, nothing recorded")


def _severity(code: int) -> int:
    """Exit codes by how bad they are: interrupted > host > bad input > failed > ok."""
    return {EXIT_OK: 0, EXIT_RUN_FAILED: 1, EXIT_BAD_INPUT: 2, EXIT_HOST: 3, EXIT_INTERRUPTED: 4}.get(code, 1)


@app.command()
def render(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: str | None = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    variants: list[str] = typer.Option([], "--variant", help="Render only these variants (repeatable)."),
) -> None:
    """Print the launch script each run would use, without touching any host."""
    for rendered in orchestrator.render_runs(spec_path, inventory=settings.inventory, hosts=_split(hosts),
                                             overrides=overrides, variants=variants):
        ui.console.print(f"[bold]# {rendered.variant} on {rendered.host}[/]")
        ui.raw(rendered.script)
