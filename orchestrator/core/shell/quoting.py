"""The words every host command is made of: a value or a path quoted for a POSIX shell, and the
bash every command runs under."""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable

DEADLINE_GRACE = 2  # seconds the host's own deadline runs past the controller's


def quote(value: object) -> str:
    """Quote one value for a POSIX shell."""
    return shlex.quote(str(value))


def path(value: str) -> str:
    """Quote a path, keeping a leading `~/` meaning the remote user's home."""
    text = str(value)
    if text == "~":
        return '"$HOME"'
    if text.startswith("~/"):
        return '"$HOME"/' + shlex.quote(text[2:])
    return shlex.quote(text)


def join(args: Iterable[object]) -> str:
    """Quote and join a command's arguments."""
    return " ".join(quote(a) for a in args)


def in_bash(command: str, deadline: float | None = None) -> str:
    """Run `command` under bash whatever the login shell is, so SSH hosts behave like the local one.

    The login shell has already read the user's rc files; SHLVL=2 stops this inner bash from
    reading ~/.bashrc a second time (bash does so under sshd only at shell level 1), which on hosts
    with conda or pyenv init costs 100 ms or more per command.

    With a `deadline` (seconds), the host's `timeout` runs the command in a process group of its
    own and, on SIGTERM (what the controller sends when it gives up) or a little after the
    deadline, signals that whole group: a grep or a stuck Python a command started does not live
    on, orphaned, on a shared host. Without `timeout` there (not coreutils), plain bash.
    """
    run = f"bash -c {quote(command)}"
    if deadline is None:
        return f"SHLVL=2 exec {run}"
    limit = math.ceil(deadline) + DEADLINE_GRACE
    return (f"if command -v timeout >/dev/null 2>&1; then SHLVL=2 exec timeout -k 5 {limit} {run}; "
            f"else SHLVL=2 exec {run}; fi")


def pythonpath_prefix(pythonpath: str | None, export: bool = False) -> str:
    """`PYTHONPATH=<folder>${PYTHONPATH:+:$PYTHONPATH} ` before a command (`export ...; ` with
    `export`): the folder first, the host's own path kept; nothing without a folder."""
    if not pythonpath:
        return ""
    setting = f"PYTHONPATH={path(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}"
    return f"export {setting}; " if export else f"{setting} "
