"""Fan-out: one piece of work on many hosts at once, with a bounded number of connection opens.

Stock sshd drops new connections past `MaxStartups 10:30:100` unauthenticated ones, so at most
`limit` handshakes are in flight; the work itself, once connected, is not bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from orchestrator.errors import OrchError
from orchestrator.core.inventory import Host
from . import connect
from .base import Connection

T = TypeVar("T")
OPENS_AT_ONCE = 8


async def fan_out(
    hosts: Iterable[Host], fn: Callable[[Connection], Awaitable[T]], limit: int = OPENS_AT_ONCE,
    *, opener: Callable[[Host], Awaitable[Connection]] = connect,
) -> dict[str, T | OrchError]:
    """`fn(conn)` on every host; `{host name: result or the OrchError that stopped it}`, in host order.

    Errors that are not `OrchError` are bugs and propagate.
    """
    gate = asyncio.Semaphore(limit)

    async def one(host: Host) -> T | OrchError:
        try:
            async with gate:
                conn = await opener(host)
        except OrchError as exc:
            return exc
        try:
            return await fn(conn)
        except OrchError as exc:
            return exc
        finally:
            await conn.close()

    chosen = list(hosts)
    results = await asyncio.gather(*(one(h) for h in chosen))
    return {h.name: r for h, r in zip(chosen, results)}
