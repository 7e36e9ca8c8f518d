"""Free space on the host's disks that a run writes to: checked before anything changes, and named
when a revert finds none.

A run writes its launch script, server log and journal (a saved copy of every file it patches)
under the workdir, and each patched file's new text beside that file. On a full disk those writes
fail halfway through a run; refusing the run first, with the disk and its free space, changes
nothing. (The revert itself needs no space: `journal.py` keeps the original beside the file.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostError
from orchestrator.remote import Connection

# What a run writes under its workdir besides the journal's copies: the launch script, records and
# the first part of the server log (an engine prints a few hundred KiB while it starts).
RUN_FLOOR_BYTES = 4 << 20


@dataclass(frozen=True)
class Disk:
    mount: str
    free: int  # bytes this user may still write there


def human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} B"


async def disks(conn: Connection, host: Host, paths: Iterable[str]) -> dict[str, Disk]:
    """Each path's disk (the disk of its nearest existing folder), in one round trip."""
    wanted = list(dict.fromkeys(paths))
    done = await conn.run(shell.disk_free(host.python, wanted), timeout=60, idempotent=True)
    found: dict[str, Disk] = {}
    for line in done.out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[1].isdigit():
            found[parts[0]] = Disk(parts[2], int(parts[1]))
    missing = [p for p in wanted if p not in found]
    if missing:
        raise HostError(f"{host.name}: could not read the free space of the disk holding {missing[0]} with "
                        f"{host.python} ({(done.err or done.out).strip()[-200:] or 'no output'}); set the host's "
                        "`python:`")
    return found


async def ensure_room(conn: Connection, host: Host, needs: dict[str, int]) -> None:
    """Refuse (HostError, exit 3) when a disk holds less than the bytes the run will write to it:
    `needs` maps a path to what is written there; paths on one disk add up."""
    found = await disks(conn, host, needs)
    wanted: dict[str, int] = {}
    first_path: dict[str, str] = {}
    for p, size in needs.items():
        mount = found[p].mount
        wanted[mount] = wanted.get(mount, 0) + size
        first_path.setdefault(mount, p)
    for mount, need in wanted.items():
        free = found[first_path[mount]].free
        if free < need:
            raise HostError(f"{host.name}: the disk {mount} (holding {first_path[mount]}) has {human(free)} free; "
                            f"the run needs at least {human(need)} there (its log, its journal and the files it "
                            f"patches); nothing was changed; free space on {mount}, or set the host's `workdir:` "
                            "to a bigger disk")


async def described(conn: Connection, host: Host, path: str) -> str:
    """`the disk M (F free)` for the disk holding `path`, or just `its disk` when that cannot be read."""
    try:
        disk = (await disks(conn, host, [path]))[path]
    except (HostError, OSError):
        return "its disk"
    return f"the disk {disk.mount} ({human(disk.free)} free)"
