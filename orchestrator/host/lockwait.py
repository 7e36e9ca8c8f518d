"""`orch run --wait`: a host whose lock another orch command holds is waited for instead of refused.

The lock is tried again with a growing pause (a command that holds a host for an hour is not asked
about every second, one that ends in a minute is not waited on for long); the user is told once who
holds it, and after the wait runs out the host is refused as busy (exit 3), saying how long it waited.
"""

from __future__ import annotations

import asyncio
import time

from orchestrator.engines.base import Say
from orchestrator.errors import HostBusy
from .lock import Holder, HostLock, read_at

FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 15.0


async def acquire(lock: HostLock, wait_s: float | None, say: Say) -> list[Holder]:
    """`lock.acquire()`, tried again while a live owner holds the lock, for at most `wait_s`
    seconds (None: not at all); returns the stale locks broken on the way."""
    if wait_s is None:
        return await lock.acquire()
    name = lock.conn.host.name
    deadline, pause, told = time.monotonic() + wait_s, FIRST_PAUSE_S, False
    while True:
        try:
            return await lock.acquire()
        except HostBusy:
            left = deadline - time.monotonic()
            if left <= 0:
                holder = await read_at(lock.conn, lock.path)
                raise HostBusy(f"{name}: still busy after waiting {wait_s:.0f} s for {lock.path}: held by "
                               f"{held_by(holder)}; wait longer (`--wait SECONDS`) or run on another host") from None
            if not told:
                holder = await read_at(lock.conn, lock.path)
                say(name, f"waiting for {lock.path} (at most {wait_s:.0f} s): held by {held_by(holder)}")
                told = True
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, LONGEST_PAUSE_S)


def held_by(holder: Holder | None) -> str:
    """Who holds the lock, as a waiting user wants it: user, command and run, since when."""
    if holder is None:
        return "nobody now (it was just released)"
    owner = holder.owner
    if owner is None:
        return f"an unreadable lock ({holder.content.strip()[:60]!r})"
    who = owner.user or f"pid {owner.pid}"
    run = f", run {owner.run}" if owner.run else ""
    return f"{who} (`orch {owner.command}` on {owner.controller} pid {owner.pid}{run}, since {owner.started_at})"
