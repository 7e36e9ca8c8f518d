"""`orch check` and `orch import`: what comes from outside orch's own runs — an experiment's
checkpoints, vetted before any run, and the server log of a run made by hand."""

from __future__ import annotations

from pathlib import Path

import typer

import orchestrator
from . import ui
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED
from .app import SET_HELP, _split, app, dumps, settings


@app.command()
def check(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: str | None = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    variants: list[str] = typer.Option([], "--variant", help="Check only these variants (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="The findings of each run (severity, code, allowed), "
                                 "with its variant, matrix point and repeat, as JSON."),
) -> None:
    """EAGLE-3 checkpoint checks for every run the experiment would make, each finding once with the
    points of the sweep it covers; exit 2 on any error."""
    groups = orchestrator.check_experiment(spec_path, inventory=settings.inventory, hosts=_split(hosts),
                                           overrides=overrides, variants=variants)
    if as_json:
        ui.raw(dumps(groups) + "\n")
    else:
        ui.findings(groups)
    bad = any(f["severity"] == "error" and not f.get("allowed") for g in groups for f in g["findings"])
    raise typer.Exit(EXIT_BAD_INPUT if bad else EXIT_OK)


@app.command("import")
def import_log(
    log: str = typer.Argument(..., metavar="LOGFILE", help="Server log of a run made by hand: a local path, or "
                              "HOST:PATH for a log on an inventory host."),
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="File the run under this experiment, "
                                          "beside its runs (`orch ls/compare/diff` see it; default: `imported`)."),
    name: str | None = typer.Option(None, "--variant", "--name", help="Variant name (default: `imported` with "
                                    "--experiment, else the file name)."),
    params: list[str] = typer.Option([], "--params", help="A param to record: key=value (repeatable)."),
    host: str | None = typer.Option(None, "--host", help="The host the run was made on, to record (default: "
                                       "the HOST of HOST:PATH, else `imported`)."),
    debug_pattern: str = typer.Option(orchestrator.DEFAULT_DEBUG_PATTERN, "--debug-pattern", help="Regex of debug lines."),
    secret: list[str] = typer.Option([], "--secret", help="An env name whose values to hide in the log, besides "
                                     "the inventory's `secrets:` and names that say so (repeatable)."),
) -> None:
    """Record a run from its server log: metrics, debug lines, diagnosis, launch command, and its start and
    end from the log's own timestamps; exit 1 if it failed."""
    done = orchestrator.import_log(log, db=settings.db, inventory=settings.inventory, name=name, params=params,
                                   host=host, debug_pattern=debug_pattern, secrets=secret, experiment=experiment)
    ui.imported(done)
    raise typer.Exit(EXIT_OK if done.status == "succeeded" else EXIT_RUN_FAILED)  # a run's status, as recorded
