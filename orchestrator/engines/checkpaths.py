"""A model or draft path of the launch command that names a folder on the host which is not there:
the server would start, load for a while and die (or, for a draft, fail after the target loaded),
so it is an ERROR before anything on the host changes. A hub id (`org/name`) is not a path: the
engine downloads it, and nothing here is checked. Engine-neutral: both engines' preflights ask."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.engines.finding import ERROR, Finding
from orchestrator.engines.hostfiles import HostFiles

CODE = "checkpoint-path-missing"


def is_local(path: str) -> bool:
    """A path the engine opens on the host rather than a hub id: absolute (`/`, `~`), or written as a
    relative path (`./x`, `../x`). `org/name` and `name` are what both engines take as hub ids."""
    return path.startswith(("/", "~", "./", "../"))


async def missing(files: HostFiles, paths: Mapping[str, object]) -> list[Finding]:
    """One ERROR per local path (by the flag that passes it) that does not exist on the host."""
    found = []
    for flag, path in paths.items():
        if not isinstance(path, str) or not path or not is_local(path) or path.startswith(("~", "./", "../")):
            continue  # a relative path or `~` resolves against the server's folder and home: not guessed here
        if not await files.exists(path):
            found.append(Finding(ERROR, CODE, f"{flag} {path}: no such file or folder on the host",
                                 "the engine would start and fail to load it (after the target, for a draft), "
                                 "having spent the start-up time",
                                 "fix the path (a host path), or push the checkpoint with `checkpoints:`"))
    return found
