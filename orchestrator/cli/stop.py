"""`orch stop RUN | --sweep RUN | --host H | --all`: stop the servers orch started, revert their
patches, record why (`run/stopping.py`, through the library face's `stop_runs`; `--sweep` names the
hosts its sweep runs on now)."""

from __future__ import annotations


import typer

import orchestrator
from orchestrator.errors import EXIT_OK, OrchError
from . import ui
from .app import _split, app, settings


@app.command()
def stop(
    run_ref: str | None = typer.Argument(None, metavar="RUN", help="Run id, uid or `last`."),
    host: str | None = typer.Option(None, "--host", help="Every run and server of these hosts or tags."),
    every: bool = typer.Option(False, "--all", help="Every run and server of every host in the inventory."),
    sweep: str | None = typer.Option(None, "--sweep", metavar="RUN",
                                        help="The whole sweep of this run (id, uid or `last`), not that run alone."),
) -> None:
    """Stop a run alone (its sweep goes on), or a whole sweep, or every run of some hosts: servers
    found by their run mark, patches reverted, the runs marked with why."""
    results = orchestrator.stop_runs(run_ref, hosts=None if host is None else _split(host), every=every, sweep=sweep,
                                     inventory=settings.inventory, db=settings.db, report=ui.progress)
    code = EXIT_OK
    for name, result in results.items():
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
        else:
            for line in result or ["nothing left to stop"]:
                ui.progress(name, line)
    raise typer.Exit(code)
