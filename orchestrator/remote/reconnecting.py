"""A connection that outlives a dropped link: it reopens and resends what is safe to resend.

Why a wrapper and not retry loops in the run lifecycle: every stage (journal, server, rehearsal,
workload tunnel) talks to the host through the `Connection` protocol, so one object that keeps
that protocol working across a reconnect covers them all, and `execute.py` keeps reading top to
bottom. The wrapper knows the transport's two failure kinds (`remote/base.py`):

- `LinkLost`: the open connection dropped. The operation is sent again on a new connection only
  when that is harmless: file reads, stats, atomic whole-file writes (the same bytes renamed into
  place again), folder copies, and commands the caller marks `idempotent=True`. A command that may
  have started (a launch) is not resent: its error goes up, and the next call reconnects.
- `Unreachable` while reopening: tried again with backoff, `RECONNECT_ATTEMPTS` times in all.
  Any other refusal (a changed host key, keys no longer accepted) stops at once: waiting does not
  fix it, and a changed key must never be worked around.

Port forwards are reopened on the same local port, so an address handed out earlier stays valid.
Once reconnecting has failed, every later call fails at once with the same reason: a run's cleanup
does not wait the whole budget again, and the host's journal lets the next command revert.

Each reopened link is kept as a `Reconnection` (when, and why the old link was lost): traffic that
does not go through the wrapper (HTTP over a forward) is cut by a drop the wrapper only notices at
its next call, so the run reads this record to say what happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.core.clock import now
from orchestrator.errors import HostError
from orchestrator.core.inventory import Host
from .base import Completed, Connection, FileStat, LinkLost, Reconnection, Unreachable

T = TypeVar("T")
Opener = Callable[[Host], Awaitable[Any]]  # an SSH-like connection: `forward` takes a local port

RECONNECT_ATTEMPTS = 5
RECONNECT_BACKOFF = 0.5  # seconds before the second attempt, doubling up to the cap
RECONNECT_BACKOFF_MAX = 4.0


def reconnections(conn: Connection) -> Sequence[Reconnection]:
    """The links a connection reopened so far, oldest first; a local connection has no link to lose."""
    return conn.reconnections


class ReconnectingConnection:
    def __init__(self, host: Host, conn: Any, opener: Opener):
        self._host = host
        self.home = conn.home
        self._conn = conn
        self._opener = opener
        self._generation = 0
        self._reopening = asyncio.Lock()
        self._forwards: dict[int, int] = {}  # remote port -> the local port callers were given
        self._gave_up: str | None = None
        self.reconnections: list[Reconnection] = []

    @classmethod
    async def open(cls, host: Host, opener: Opener) -> ReconnectingConnection:
        """The first connection is not retried here: a host unreachable from the start is
        reported at once (the transport already retries a refused handshake)."""
        return cls(host, await opener(host), opener)

    @property
    def host(self) -> Host:
        return self._host

    @host.setter
    def host(self, host: Host) -> None:  # the session sets the host with its workdir made absolute
        self._host = host
        self._conn.host = host

    # -- the Connection protocol ----------------------------------------------------------

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        return await self._call(lambda c: c.run(command, timeout=timeout, input=input), resend=idempotent)

    async def read_file(self, path: str) -> bytes:
        return await self._call(lambda c: c.read_file(path), resend=True)

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        await self._call(lambda c: c.write_file(path, data, mode), resend=True)

    async def stat(self, path: str) -> FileStat | None:
        return await self._call(lambda c: c.stat(path), resend=True)

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        await self._call(lambda c: c.put_tree(local_dir, remote_dir), resend=True)

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        """Writes at fixed offsets, so resending after a drop rewrites the same bytes (progress may
        count a chunk twice)."""
        await self._call(lambda c: c.put_file(local, path, offset, advance), resend=True)

    async def forward(self, remote_port: int) -> tuple[str, int]:
        address: tuple[str, int] = await self._call(
            lambda c: c.forward(remote_port, self._forwards.get(remote_port, 0)), resend=True)
        self._forwards[remote_port] = address[1]
        return address

    async def close(self) -> None:
        await _close_quietly(self._conn)

    # -- reconnecting ---------------------------------------------------------------------

    async def _call(self, op: Callable[[Any], Awaitable[T]], *, resend: bool) -> T:
        for drops in range(1, RECONNECT_ATTEMPTS + 2):
            if self._gave_up is not None:
                raise HostError(self._still_down())
            generation = self._generation
            try:
                return await op(self._conn)
            except LinkLost as lost:
                if (lost.started and not resend) or drops > RECONNECT_ATTEMPTS:
                    raise  # it may have run, so the caller decides (the next call reconnects); or a flapping link
                await self._reopen(generation, lost)
        raise AssertionError("unreachable")

    async def _reopen(self, generation: int, cause: LinkLost) -> None:
        """Replace a dropped connection (once, however many calls saw it drop)."""
        async with self._reopening:
            if self._gave_up is not None:
                raise HostError(self._still_down())
            if generation != self._generation:
                return  # another call already reconnected
            await _close_quietly(self._conn)
            fresh = await self._open_again(cause)
            fresh.host = self._host
            for remote_port, local_port in list(self._forwards.items()):
                self._forwards[remote_port] = await self._forward_again(fresh, remote_port, local_port)
            self._conn = fresh
            self._generation += 1
            self.reconnections.append(Reconnection(now(), _reason(cause, self._host)))

    async def _open_again(self, cause: LinkLost) -> Any:
        started = time.monotonic()
        delay = RECONNECT_BACKOFF
        last: HostError = cause
        for attempt in range(1, RECONNECT_ATTEMPTS + 1):
            try:
                return await self._opener(self._host)
            except Unreachable as exc:
                last = exc
            except HostError as exc:  # refused for a reason time does not mend
                self._gave_up = self._give_up_message(
                    f"{_reason(cause, self._host)}; reconnecting was refused: {_reason(exc, self._host)}")
                raise HostError(self._gave_up) from None
            if attempt < RECONNECT_ATTEMPTS:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_BACKOFF_MAX)
        elapsed = time.monotonic() - started
        self._gave_up = self._give_up_message(
            f"{_reason(cause, self._host)}; {RECONNECT_ATTEMPTS} attempts to reconnect over {elapsed:.0f} s "
            f"failed (last: {_reason(last, self._host)})")
        raise HostError(self._gave_up)

    def _give_up_message(self, why: str) -> str:
        name = self._host.name
        return (f"{name}: {why}; the server, if started, keeps running there and orch's patches stay "
                f"recorded in {self._host.workdir}/journal: `orch revert --host {name}` (or the next "
                f"`orch run` on it) reverts them once it is reachable")

    def _still_down(self) -> str:
        name = self._host.name
        return (f"{name}: still unreachable (reconnecting gave up earlier in this command); "
                f"`orch revert --host {name}` reverts orch's patches once it is reachable")

    async def _forward_again(self, fresh: Any, remote_port: int, local_port: int) -> int:
        """The same local port if it is still free (it normally is: the old listener closed with its connection)."""
        address: tuple[str, int]
        try:
            address = await fresh.forward(remote_port, local_port)
        except HostError:
            address = await fresh.forward(remote_port, 0)
        return address[1]


def _reason(exc: BaseException, host: Host) -> str:
    """An error's text without the leading `host: ` (the message we build names the host once)."""
    text = str(exc)
    prefix = f"{host.name}: "
    return text[len(prefix):] if text.startswith(prefix) else text


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except (HostError, OSError):
        pass  # a dead link has nothing left to close on the far side
