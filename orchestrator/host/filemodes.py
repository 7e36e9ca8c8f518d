"""The permission bits of a pushed checkpoint's files on the host: each file gets the mode its local
file has (a link: the mode of what it points to, as its bytes are), a script stays executable and a
read-only file read-only. A file whose bytes are already there but whose mode differs gets its mode
alone fixed; nothing moves.

A file's bytes reach the host under a temporary name whose mode the transport chooses (SFTP's, or
the umask's), so modes are set after every file is in place, in as few commands as there are modes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.core import shell
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed

PERMISSIONS = 0o777  # the bits kept: set-id bits on a checkpoint file are refused by chmod for most users
PATHS_AT_ONCE = 200  # files per chmod command (well under any host's argument limit)


def listing_command(folder: str, skip: Iterable[str] = ()) -> str:
    """`mode relative-path` NUL-separated for every file under `folder` (nothing when missing)."""
    excluded = "".join(f" ! -name {shell.quote(s)}" for s in skip)
    return f"cd {shell.path(folder)} 2>/dev/null && find . -type f{excluded} -printf '%m %P\\0'; true"


def chmod_command(folder: str, mode: int, relatives: list[str]) -> str:
    """Set `mode` on each of `relatives` (paths under `folder`)."""
    return f"cd {shell.path(folder)} && chmod {mode:o} -- " + " ".join(shell.quote(r) for r in relatives)


async def on_host(conn: Connection, folder: str, skip: Iterable[str] = ()) -> dict[str, int]:
    """relative path -> permission bits of every file under `folder` on the host."""
    done = await conn.run(listing_command(folder, tuple(skip)), idempotent=True)
    found = {}
    for record in done.stdout.split(b"\0"):
        if record:
            mode, rel = record.decode(errors="surrogateescape").split(" ", 1)
            found[rel] = int(mode, 8) & PERMISSIONS
    return found


async def ensure(conn: Connection, folder: str, wanted: Mapping[str, int], skip: Iterable[str] = ()) -> int:
    """Give each file of `wanted` (relative path -> mode) its mode under `folder`; returns how many
    files had another one."""
    have = await on_host(conn, folder, skip)
    by_mode: dict[int, list[str]] = {}
    for rel, mode in sorted(wanted.items()):
        if rel in have and have[rel] != mode & PERMISSIONS:
            by_mode.setdefault(mode & PERMISSIONS, []).append(rel)
    for mode, relatives in sorted(by_mode.items()):
        for i in range(0, len(relatives), PATHS_AT_ONCE):
            done = await conn.run(chmod_command(folder, mode, relatives[i:i + PATHS_AT_ONCE]), idempotent=True)
            if not done.ok:
                raise command_failed(done, f"{conn.host.name}: cannot set mode {mode:04o} on files under {folder}: "
                                           f"{done.err.strip()[-200:]}; check the folder's owner")
    return sum(len(r) for r in by_mode.values())
