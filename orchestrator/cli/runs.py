"""`orch run` and `orch render`: an experiment's runs, made or only rendered."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from orchestrator import engines
from orchestrator.core import spec as specs
from orchestrator.run import plankey
from . import swept, ui, waiting
from .text import visible
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_HOST, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED
from .app import SET_HELP, _load, _store, app

if TYPE_CHECKING:
    from orchestrator.store.database import Store


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
    from orchestrator.run import execute, sweep

    spec, plans, chosen = _load(spec_path, hosts, overrides, variants)
    if no_preflight:
        spec = dataclasses.replace(spec, preflight=False)
    if allow_busy_gpus:
        spec = dataclasses.replace(spec, allow_busy_gpus=True)
    if accept_drift:
        spec = dataclasses.replace(spec, accept_drift=True)
    if wait is not None:
        spec = dataclasses.replace(spec, lock_wait_s=waiting.seconds(wait))
    plans = plankey.fingerprinted(spec, plans)
    store = cast("Store", _OpenedWhenUsed()) if dry_run else _store()  # a dry run records nothing
    if resume:
        plans = _unfinished(store, spec.name, plans)
        if not plans:
            ui.console.print("every plan already has a succeeded run with the same fingerprint; nothing to do")
            raise typer.Exit(EXIT_OK)
    from orchestrator.core.clock import now
    from . import interrupt

    controller, since = execute.controller(), now()  # the runs this command makes, found again after a signal
    ui.reporter.expect(plans)  # the live table's columns: the params that tell the plans apart
    done, why = interrupt.run(sweep.run_all(spec, plans, chosen, store, ui.reporter, dry_run=dry_run),
                              store, controller, since)
    if why is not None:  # every host cleaned up: what each did, the runs, exit 130
        outcomes, unstarted = interrupt.report(store, controller, since, [h.name for h in chosen], plans)
        ui.summary(outcomes, engines.get(spec.engine).metrics, ui.matrix_params(plans, outcomes, store))
        for said in swept.unstarted_lines(unstarted, swept.names(plans), f"interrupted by {why}"):
            ui.console.print(visible(said), markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    outcomes = done or []
    if not dry_run:
        ui.summary(outcomes, engines.get(spec.engine).metrics, ui.matrix_params(plans, outcomes, store))
        # a plan that never became a run (its host refused, or could not be reached) is shown by
        # nothing else: its error, once per reason, on a line of its own below the table
        ui.not_run(outcomes)
    else:  # no runs, so no table: each error on its own line, once (the experiment's own error is every plan's)
        ui.progress_done()
        for error in dict.fromkeys(o.error for o in outcomes if o.error):
            ui.error(error)
    raise typer.Exit(max((o.exit_code for o in outcomes), default=EXIT_OK, key=_severity))


class _OpenedWhenUsed:
    """The database of a dry run, opened only if something asks it (an interrupted dry run's report):
    a dry run writes no run, so it loads no ORM (a third of its start) and makes no database file."""

    def __init__(self) -> None:
        self._store: Store | None = None

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            self._store = _store()
        return getattr(self._store, name)


def _severity(code: int) -> int:
    """Exit codes by how bad they are: interrupted > host > bad input > failed > ok."""
    return {EXIT_OK: 0, EXIT_RUN_FAILED: 1, EXIT_BAD_INPUT: 2, EXIT_HOST: 3, EXIT_INTERRUPTED: 4}.get(code, 1)


def _unfinished(store: Store, experiment: str, plans: list[specs.RunPlan]) -> list[specs.RunPlan]:
    """The plans without a succeeded run of the same key and fingerprint in this experiment (for
    --resume), one line per plan saying why it runs or is skipped."""
    decisions = plankey.decide(plans, store.succeeded_keys(experiment))
    for decision in decisions:
        ui.console.print(visible(decision.line), markup=False)
    return [d.plan for d in decisions if d.runs]


@app.command()
def render(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: str | None = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    variants: list[str] = typer.Option([], "--variant", help="Render only these variants (repeatable)."),
) -> None:
    """Print the launch script each run would use, without touching any host."""
    from orchestrator.run import execute
    from orchestrator.host.session import absolute
    from orchestrator.remote import is_this_machine

    spec, plans, chosen = _load(spec_path, hosts, overrides, variants)
    for plan in plans:
        host = chosen[0]
        if is_this_machine(host):  # a remote home is only known once connected
            host = dataclasses.replace(host, workdir=absolute(host.workdir, str(Path.home())))
        context = execute.run_context(spec, plan, host, "<run>")
        from orchestrator.core import render as renderer
        from orchestrator.core.secrets import redact

        ui.console.print(f"[bold]# {plan.variant} on {host.name}[/]")
        ui.raw(redact(renderer.launch_script(spec.template, context), context["env"], context["secret_names"]))
