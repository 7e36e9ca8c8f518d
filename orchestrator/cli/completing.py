"""What `orch --version` and `orch completion bash|zsh|fish` give: the package's version, and a
shell's completion script (typer's completion classes over click's shell-completion machinery).
The script calls `orch` back with `_ORCH_COMPLETE` set; `prepare()` readies the classes for that
call, and `runs` and `experiments` complete a RUN argument and an experiment's name from the
database. The command itself registers in cli/shell.py."""

from __future__ import annotations

import os
from typing import Any

import typer

from orchestrator.errors import SpecError

COMPLETE_VAR = "_ORCH_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
PROG = "orch"


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("orch")
    except PackageNotFoundError:  # a source tree run without installing: no metadata to read
        return "unknown (not installed; `pip install -e .` in the clone)"


def print_version(value: bool) -> None:
    """The eager `--version` option: the version, then exit 0 before any command runs."""
    if value:
        print(f"orch {version()}")
        raise typer.Exit(0)


def prepare() -> None:
    """Register the shells' completion classes when the completion script calls `orch` back (the
    app is built without typer's --install-completion, which would register them)."""
    if os.environ.get(COMPLETE_VAR):
        from typer.completion import completion_init

        completion_init()


def script(shell: str, app: typer.Typer) -> str:
    """The completion script of `shell` for `app`, as `orch` itself would serve it (the app is handed
    in: it imports this module for --version, so this one names no app)."""
    if shell not in SHELLS:
        raise SpecError(f"orch completion {shell!r}: not a shell orch completes; use one of {', '.join(SHELLS)}")
    from typer.completion import completion_init
    from typer.main import get_command

    completion_init()
    from typer._click.shell_completion import get_completion_class

    found = get_completion_class(shell)
    assert found is not None, shell
    text: str = found(get_command(app), {}, PROG, COMPLETE_VAR).source()
    return text.strip() + "\n"


def _db(ctx: Any) -> str:
    root = ctx.find_root() if ctx is not None else None
    given = root.params.get("db") if root is not None else None
    return str(given or os.environ.get("ORCH_DB") or "sqlite:///orch.db")


def runs(ctx: typer.Context, incomplete: str) -> list[str]:
    """A RUN argument: `last`, then the newest runs' ids."""
    import orchestrator

    ids = orchestrator.recorded_names("runs", db=_db(ctx))
    return [v for v in ("last", *ids) if v.startswith(incomplete)]


def experiments(ctx: typer.Context, incomplete: str) -> list[str]:
    """An experiment's name, from the runs recorded."""
    import orchestrator

    return [v for v in orchestrator.recorded_names("experiments", db=_db(ctx)) if v.startswith(incomplete)]
