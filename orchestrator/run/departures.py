"""A host that leaves a sweep, said the moment it leaves: why (it could not be reached, it refused,
its link failed for good, another command broke its lock), and what becomes of the plans still to run
that it could have run: the other hosts take them, or none can and they are not run. A sweep any
host left exits 3, as a host that could not be reached does (`errors.EXIT_HOST`), even when the others
ran every plan: the sweep did not run where it was asked to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from orchestrator.core.inventory import Host
from orchestrator.engines.base import Engine, Say
from orchestrator.errors import HostBusy, OrchError
from orchestrator.host import lifecycle
from orchestrator.host.lifecycle import Held, Locking
from orchestrator.host.session import HostSession
from orchestrator.remote.group import fan_out
from .attempt import Reporter
from .queue import Queue
from .slots import able

T = TypeVar("T")


class Departures:
    """The hosts that left one sweep, with why; each said once, when it left."""

    def __init__(self, queue: Queue, hosts: Sequence[Host], reporter: Reporter,
                 left: dict[str, OrchError] | None = None) -> None:
        self.queue, self.reporter = queue, reporter
        self.hosts = {h.name: h for h in hosts}
        self.left = left if left is not None else {}  # filled in as hosts leave: the caller's, if given

    async def leave(self, name: str, error: OrchError, retried: bool = False) -> None:
        """`name` takes no more plans; said with the plans still to run it could have run (`retried`:
        its run the failure cut short goes back to the queue, one of them)."""
        if name in self.left:
            return
        self.left[name] = error
        await self.queue.lose(name, error)
        verb = "refused" if isinstance(error, HostBusy) else "left the sweep"
        why = str(error).removeprefix(f"{name}: ")  # the line names the host already
        self.reporter.message(name, f"{verb}: {why}; {self._what_becomes(name, retried)}")

    def _what_becomes(self, name: str, retried: bool) -> str:
        host = self.hosts.get(name)
        if host is None:  # a node of a Slurm job, not an inventory host: the gang says what it leaves
            return "it takes no more plans"
        plans = [e.plan for e in self.queue.pending if able(host, e.plan)]
        staying = [h for n, h in self.hosts.items() if n not in self.left and n not in self.queue.lost]
        elsewhere = sum(any(able(h, plan) for h in staying) for plan in plans) + retried
        stranded = len(plans) + retried - elsewhere
        total, nowhere = elsewhere + stranded, "are not run (no other host left can run them)"
        if not total:
            return "no plan was left for it"
        if not stranded:
            return f"its {total} remaining plan(s) go to the other hosts"
        if not elsewhere:
            return f"its {total} remaining plan(s) {nowhere}"
        return f"of its {total} remaining plan(s), {elsewhere} go to the other hosts and {stranded} {nowhere}"

    async def on_hosts(self, hosts: Iterable[Host], work: Callable[[Held], Awaitable[T]], say: Say,
                       locking: Locking | None, stand_in: Engine | None,
                       ended: Callable[[str], Awaitable[None]] | None = None) -> dict[str, T | OrchError]:
        """`lifecycle.on_hosts`, each host that cannot be opened or locked, or whose work fails,
        leaving the sweep at once; `ended(name)` for every host whose lifecycle ends (the gang's
        `leave`: it must not wait for a host that never joins)."""
        async def one(session: HostSession) -> T:
            try:
                async with lifecycle.holding(session, say, locking, stand_in) as held:
                    return await work(held)
            except OrchError as exc:
                await self.leave(session.host.name, exc)
                raise
            finally:
                if ended is not None:
                    await ended(session.host.name)

        async def opener(host: Host) -> HostSession:
            try:
                return await lifecycle.open_session(host, say)
            except BaseException as exc:
                if isinstance(exc, OrchError):
                    await self.leave(host.name, exc)
                if ended is not None:
                    await ended(host.name)
                raise

        return await fan_out(hosts, one, opener=opener)
