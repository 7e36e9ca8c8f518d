"""Fan-out: one piece of work on many hosts at once, with a bounded number of connection opens.
The only one in orch: every command that works on several hosts (run, check, revert, clean,
patches, hosts check) goes through `fan_out`.

Stock sshd drops new connections past `MaxStartups 10:30:100` unauthenticated ones, so at most
`limit` handshakes are in flight to any one sshd: the first hop a connection opens (the host's
address and port, or its jump host). Hosts behind different sshds handshake side by side, up to
ALL_AT_ONCE in all; the work itself, once connected, is not bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from orchestrator.errors import OrchError
from orchestrator.core.inventory import Host


class Closable(Protocol):
    """What an opener hands out: a connection, or a host session around one."""

    async def close(self) -> None: ...


T = TypeVar("T")
C = TypeVar("C", bound=Closable)
OPENS_AT_ONCE = 8  # handshakes in flight to one sshd: below MaxStartups' 10
ALL_AT_ONCE = 64  # handshakes in flight in all: what the controller's one thread keeps up with


async def fan_out(
    hosts: Iterable[Host], fn: Callable[[C], Awaitable[T]], limit: int = OPENS_AT_ONCE,
    *, opener: Callable[[Host], Awaitable[C]],
) -> dict[str, T | OrchError]:
    """`fn(opener(host))` on every host (`remote.connect` opens a Connection, `HostSession.open` a
    session); `{host name: result or the OrchError that stopped it}`, in host order.

    Every host's work ends (its cleanup included) before anything is raised: errors that are not
    `OrchError` are bugs, and they, Ctrl-C and cancellation propagate once all are done.
    """
    gates: dict[str, asyncio.Semaphore] = {}
    every = asyncio.Semaphore(ALL_AT_ONCE)

    async def one(host: Host) -> T | OrchError:
        gate = gates.setdefault(first_hop(host), asyncio.Semaphore(limit))
        try:
            async with gate, every:
                opened = await opener(host)
        except OrchError as exc:
            return exc
        try:
            return await fn(opened)
        except OrchError as exc:
            return exc
        finally:
            await opened.close()

    chosen = list(hosts)
    results = await asyncio.gather(*(one(h) for h in chosen), return_exceptions=True)
    done: dict[str, T | OrchError] = {}
    for host, result in zip(chosen, results):
        if isinstance(result, OrchError) or not isinstance(result, BaseException):
            done[host.name] = result
        else:
            raise result
    return done


def first_hop(host: Host) -> str:
    """The sshd a connection to `host` handshakes with first: its jump host's when it has one (the
    first of a chain), else its own address and port; a Slurm host's login node, or the name an
    ssh config resolves. Hosts with the same first hop share one bound of OPENS_AT_ONCE."""
    if host.slurm is not None:
        return f"slurm:{host.slurm.login}"
    if host.proxy_jump:
        return f"jump:{host.proxy_jump.split(',')[0].strip()}"
    return f"{host.transport}:{host.address or host.name}:{host.port or 22}"


async def uncancelled(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end even when this task is cancelled meanwhile (a second signal, a sibling's
    failure): a stop, a revert or a release cut short would leave a server up, a file half restored
    or an allocation held. The cancellation is raised again once the work is done."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError as exc:
            if task.done():
                raise
            cancelled = cancelled or exc  # the first names the signal
    if cancelled is not None:
        raise cancelled
