"""One orch command at a time patches a package tree, whatever workdir it works in.

The host lock (`lock.py`) is per workdir, but the installed package folder a run patches can be
shared by several workdirs: two users with their own workdirs and one venv, or two inventory hosts
on one machine with the same python. So before a run applies its first patch in place, orch also
takes a lock keyed by the real path of the package folder it patches (the folder of the file, for a
patch to an absolute path): `.orch-patch-lock-<package>` beside that folder, where every orch on the
machine sees it (orch can write there: it patches that folder). It is a `HostLock` under another
name: taken atomically, owner and lease inside, renewed while held, broken with a warning once
stale (lease run out, or its owner a dead process on this controller host); nobody's process is
signalled. It is held until the host's command ends (every run's revert done), then removed.

A run that finds a live owner there fails with one line naming the tree and its holder (exit 3, as
for a busy host), before anything in the tree changes; with `orch run --wait [TIMEOUT]` it waits
(`lockwait.py`). Runs of one command on one host share the locks that command took; a run with no
patches, or whose patches go to its own copy of the packages (`overlay.py`), takes none.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Iterable
from dataclasses import replace

from orchestrator.core import shell
from orchestrator.core.spec import PatchDef
from orchestrator.engines.base import Say
from orchestrator.errors import HostBusy, HostError, OrchError
from . import lockwait, overlay
from .lock import HostLock, read_at
from .session import HostSession

PREFIX = ".orch-patch-lock-"

_held: dict[tuple[str, str], HostLock] = {}  # (host name, lock path) -> the lock this command holds
_taking: dict[tuple[str, str], asyncio.Lock] = {}  # so two runs of one host take a tree's lock once


async def trees(session: HostSession, patches: Iterable[tuple[PatchDef, str]]) -> list[str]:
    """The real paths of the package folders that (patch, resolved file) pairs change, sorted."""
    folders = set()
    for patch, file in patches:
        package = overlay.package_of(patch)
        folders.add(session.packages.get(package, posixpath.dirname(file)) if package else posixpath.dirname(file))
    if not folders:
        return []
    done = await session.conn.run(f"realpath -m -- {' '.join(shell.quote(f) for f in sorted(folders))}",
                                  idempotent=True)
    real = [line for line in done.out.splitlines() if line] if done.ok else []
    return sorted(set(real if len(real) == len(folders) else folders))


def lock_path(tree: str) -> str:
    """Where the lock of package tree `tree` lives: beside it, seen by every workdir."""
    tree = tree.rstrip("/")
    return f"{posixpath.dirname(tree)}/{PREFIX}{posixpath.basename(tree)}"


async def hold_plan(session: HostSession, patches: Iterable[PatchDef], run: str, wait_s: float | None,
                    say: Say) -> None:
    """`hold` for a plan's patches, resolved on the host: taken before the run reads the files it
    patches (its drift check, the text its patches are prepared from), so what it saves as their
    original is never another run's patched text."""
    await hold(session, [(patch, await session.resolve(patch)) for patch in patches], run, wait_s, say)


async def hold(session: HostSession, patches: Iterable[tuple[PatchDef, str]], run: str, wait_s: float | None,
               say: Say) -> None:
    """Hold the lock of every package tree `patches` change (in path order: two commands never
    wait on each other crosswise), until `release_host`. Raises HostBusy (exit 3) while another
    orch command holds one and `wait_s` (`orch run --wait`) is None or runs out."""
    host = session.host.name
    for tree in await trees(session, patches):
        key = (host, lock_path(tree))
        async with _taking.setdefault(key, asyncio.Lock()):
            if key in _held:
                continue
            lock = HostLock(session.conn, session.host.workdir, "run", path=key[1])
            lock.owner = replace(lock.owner, run=run)
            try:
                broken = await lockwait.acquire(lock, wait_s, say)
            except HostBusy as exc:
                if wait_s is not None:  # the wait ran out: lockwait's line says how long and who
                    raise
                holder = await read_at(session.conn, key[1])
                raise HostBusy(f"{host}: package tree {tree} is being patched by another orch command: {key[1]} "
                               f"is held by {lockwait.held_by(holder)}; nothing was changed; run `orch run --wait` "
                               "to wait for it") from exc
            except OrchError as exc:  # the lock cannot be created there (a read-only site-packages)
                raise HostError(f"{host}: cannot take the patch lock {key[1]} of package tree {tree} ({exc}); "
                                "nothing was changed; make its folder writable, or install the package where orch "
                                "may write (a virtual environment of your own)") from exc
            for stale in broken:
                who = stale.owner.describe() if stale.owner else "nobody readable"
                say(host, f"warning: broke the stale patch lock {key[1]} of package tree {tree} "
                          f"({stale.broken_because}; held by {who})")
            _held[key] = lock
            lock.keep_alive(lambda: run)


def holds(host: str) -> list[str]:
    """The tree locks this command holds on `host` (and on its Slurm job's nodes)."""
    return [path for name, path in _held if _mine(name, host)]


async def release_host(host: str, say: Say) -> None:
    """Remove every tree lock this command took on `host` (and its nodes `host:NODE`)."""
    for key in [k for k in _held if _mine(k[0], host)]:
        lock = _held.pop(key)
        _taking.pop(key, None)
        try:
            await lock.release()
        except (OrchError, OSError) as exc:  # the host went away: the lease runs out on its own
            say(host, f"warning: could not remove {lock.path} ({exc}); it expires with its lease")


def _mine(name: str, host: str) -> bool:
    return name == host or name.startswith(f"{host}:")
