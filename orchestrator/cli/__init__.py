"""The `orch` command: thin typer commands that load inputs, call the work, and print.

This module holds `main()`; the app, the global options and the helpers every command shares live
in `app`; the commands live in `runs`, `records`, `hosts`, `inputs` and the rest, imported at the
end to register."""

from __future__ import annotations

import os
import sys

import typer

from .app import app as app, hosts_app as hosts_app  # first: the app the commands register on
from . import completing, ui, waiting
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, OrchError


def _usage_error() -> type:
    """The base class of command-line usage errors (click's ClickException). Newer typer releases
    carry their own copy of click, so it is reached through a public subclass, not by import."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    """Entry point: one-line errors with the right exit code."""
    for arg in sys.argv[1:]:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8, kept as surrogates: no file or database takes them
            ui.error(f"argument {os.fsencode(arg)!r} is not UTF-8 text; give it in UTF-8")
            sys.exit(EXIT_BAD_INPUT)
    sys.argv[1:] = waiting.with_values(sys.argv[1:])  # `--wait` alone: its default value
    completing.prepare()  # the completion script calling back: its shells' classes registered
    try:
        # returns the code of a typer.Exit instead of raising it; `python -m orchestrator.cli` completes as `orch`
        code = app(standalone_mode=False, complete_var=completing.COMPLETE_VAR)
    except OrchError as exc:
        ui.error(str(exc), exc.evidence)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        ui.error("interrupted; patches of the interrupted run were reverted")
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if isinstance(exc, _usage_error()):
            exc.show()
            sys.exit(EXIT_BAD_INPUT)
        raise
    sys.exit(code if isinstance(code, int) else EXIT_OK)


# Last, after `main`. `orch --help` lists commands in the order
# they register: keep this import order (run first; the `hosts` group is always listed last).
from . import runs as _runs, records as _records, hosts as _hosts, inputs as _inputs, stop as _stop, compare as _compare  # noqa: F401, I001
from . import report as _report  # noqa: F401, E402, I001
from . import doctor as _doctor  # noqa: F401, E402, I001
from . import shell as _shell  # noqa: F401, E402, I001
from . import tags as _tags  # noqa: F401, E402, I001
