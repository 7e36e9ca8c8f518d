"""`orch tag RUN key=value ... [--rm KEY]` and `orch note RUN TEXT|-|--rm`: what people say of a
run after it ran, kept with it (through the library face's `tag_run` and `note_run`)."""

from __future__ import annotations

import sys

import typer

import orchestrator
from . import completing, tagged, ui
from .app import app, settings

RUN_HELP = "A run: its id (12), a unique prefix of its uid, `last` or `last~N`."


@app.command()
def tag(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    tags: list[str] = typer.Argument(None, metavar="KEY=VALUE...",
                                     help="Tags to set; a key the run has takes the new value. A key: letters, "
                                          "digits and _ . - / : (at most 64); the value: any text (at most 1000)."),
    remove: list[str] = typer.Option([], "--rm", metavar="KEY", help="Remove this tag (repeat for several)."),
) -> None:
    """Tag a run (`orch tag 12 baseline=yes gpu=h100`), or remove a tag (`--rm baseline`); who set
    each and when is recorded. `orch show` shows them, `orch ls --tag KEY[=VALUE]` finds the runs."""
    run_id = orchestrator.resolve_run(run_ref, db=settings.db)  # said by its id: `last` moves on
    now = orchestrator.tag_run(str(run_id), tags or (), db=settings.db, remove=remove)
    ui.console.print(f"run {run_id}: " + (f"tags {tagged.pairs(now)}" if now else "no tags"), soft_wrap=True)


@app.command()
def note(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    text: str | None = typer.Argument(None, metavar="TEXT", help="The note (quote it); `-` reads it from standard "
                                                                 "input; empty removes it. At most 20000 characters."),
    clear: bool = typer.Option(False, "--rm", help="Remove the run's note."),
) -> None:
    """Set a run's note, free text kept with it (`orch note 12 "draft from step 40k"`); it replaces
    the note the run had. `orch show` shows it with who wrote it and when."""
    if text == "-":
        text = sys.stdin.read().removesuffix("\n")  # `echo ... |` and a heredoc end in one newline
    run_id = orchestrator.resolve_run(run_ref, db=settings.db)
    done = orchestrator.note_run(str(run_id), text, db=settings.db, clear=clear)
    ui.console.print(f"run {run_id}: " + ("note set" if done else "note removed"))
