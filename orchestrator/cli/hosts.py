"""`orch hosts`, `hosts check`, `revert` and `patches`: the inventory's hosts and what orch left on them."""

from __future__ import annotations

import json
from typing import Any

import typer

import orchestrator
from . import ui
from .text import line
from orchestrator.errors import EXIT_OK, EXIT_RUN_FAILED, OrchError
from .app import _split, app, dumps, hosts_app, settings


@app.command()
def revert(
    host: str | None = typer.Option(None, "--host", help="Host or tag (default: every host in the inventory)."),
    force: bool = typer.Option(False, "--force", help="Also restore files that changed after orch patched them."),
) -> None:
    """Revert every patch orch left applied on a host (after a crash, or a drifted file)."""
    results = orchestrator.revert_patches(_split(host), inventory=settings.inventory, db=settings.db, force=force,
                                          report=ui.progress)
    code = EXIT_OK
    for name, result in results.items():
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
        elif not result:
            ui.progress(name, "nothing to revert")
        else:
            for r, baseline in result:
                ui.progress(name, f"{r.state}: {r.file} ({r.name}, run {r.run})")
                if r.state == "drifted":
                    code = max(code, EXIT_RUN_FAILED)
                    kept = "orch's revert left it" if baseline else f"it was patched; original kept at {r.backup}"
                    ui.progress(name, f"  changed since {kept}; `orch revert --host {name} --force` restores it")
    raise typer.Exit(code)


@app.command()
def patches(
    host: str | None = typer.Option(None, "--host", help="Host or tag (default: every host in the inventory)."),
    as_json: bool = typer.Option(False, "--json", help="Each host's patched files, their states and runs, as JSON."),
) -> None:
    """What orch has applied (or left drifted) on each host's files, and by which run; a file changed
    by hand since orch's revert left it is drifted too."""
    results = orchestrator.list_patches(_split(host), inventory=settings.inventory, db=settings.db,
                                        report=ui.progress)
    rows: list[dict[str, Any]] = []
    code = EXIT_OK
    for result in results.values():
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
        else:
            rows += result
    if as_json:
        ui.raw(dumps(rows) + "\n")
    else:
        ui.patches(rows)
    raise typer.Exit(code)


@app.command()
def clean(
    host: str | None = typer.Option(None, "--host", help="Host or tag (default: every host in the inventory)."),
    older_than: float = typer.Option(7.0, "--older-than", min=0, help="Days since the run ended."),
    big_logs: bool = typer.Option(False, "--big-logs", help="Also remove folders whose log was too big to store "
                                  "whole (the database keeps the lines orch reads and the log's end)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
) -> None:
    """Remove the run folders of ended runs from hosts once their logs are in the database."""
    results = orchestrator.clean_hosts(_split(host), inventory=settings.inventory, db=settings.db,
                                       older_than=older_than, big_logs=big_logs, dry_run=dry_run, report=ui.progress)
    code = EXIT_OK
    for name, result in results.items():
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
        else:
            ui.cleaned(name, result, dry_run)
    raise typer.Exit(code)


@hosts_app.callback()
def hosts_list(ctx: typer.Context) -> None:
    """List the inventory's hosts."""
    if ctx.invoked_subcommand:
        return
    for h in orchestrator.list_hosts(inventory=settings.inventory):
        extra = " (rehearsal)" if h.rehearsal else ""
        ui.console.print(line(f"{h.name}: {h.transport} {h.where}, {h.gpus} GPUs, workdir {h.workdir}{extra}"
                              + (f", tags {', '.join(h.tags)}" if h.tags else "")))


def _a_port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise typer.BadParameter(f"{value} is not a TCP port; give one from 1 to 65535")
    return value


@hosts_app.command("check")
def hosts_check(
    hosts: str | None = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: all)."),
    port: int = typer.Option(30000, "--port", callback=_a_port,  # checked here: typer's bounds would load pydantic
                             help="Report whether this port is already listening on each host (1-65535)."),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for each host's SSH handshake."),
    as_json: bool = typer.Option(False, "--json", help="Every host's facts as JSON (each engine's under `packages`)."),
) -> None:
    """Reachability, round-trip time, OS, Python, each engine's package, GPUs, free disk and port per host (one
    round trip each)."""
    facts = orchestrator.check_hosts(_split(hosts), inventory=settings.inventory, port=port, timeout=timeout)
    if as_json:
        ui.raw(json.dumps([f.as_json() for f in facts], indent=2) + "\n")
    else:
        ui.host_facts(facts)
    unreachable = [f.host for f in facts if not f.reachable]
    if unreachable:  # after the report: stdout stays whole, the summary line goes to stderr with exit 3
        from orchestrator.errors import HostError

        raise HostError(f"{len(unreachable)} of {len(facts)} hosts unreachable: {', '.join(unreachable)}; "
                        f"the report above says why for each")
