"""The one queue every host of a sweep takes its runs from.

Hosts take the next plan that fits them now (the widest first, then in plan order: `_preference`):
one their GPU count can run (`slots.able`) and their free GPU slots and patch set admit
(`slots.Slots.lease`). The hosts are
those the experiment's `hosts:` or `--hosts` chose (names or tags), so a plan fits any of them that
has the GPUs. A host whose link fails for good takes no more plans: the others take what is left,
and its run that the failure cut short goes back to the front of the queue once (a retry), to be run
elsewhere. A host leaves the sweep when no plan left fits it and no run anywhere is still going
(a run going on may yet come back as a retry).

Server reuse (`serving.py`): a run that ends well asks for the next pending plan of its server key
that fits its host (`take_same`), which then runs on the same slot and server. A host taking a new
plan prefers one whose server key no run is using now, so that hosts start different servers and
the plans of one key follow each other on one server instead of each host launching its own.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from orchestrator.core.inventory import Host
from orchestrator.core.spec import RunPlan
from orchestrator.errors import OrchError, SpecError
from .slots import Lease, Slots, able


@dataclass(frozen=True)
class Entry:
    """A plan waiting in the queue: its place in the sweep and, for a retry, the run it retries."""

    order: int
    plan: RunPlan
    retry_of: int | None = None  # the id of the run cut short on a lost host
    lost_host: str = ""


def check_fits(plans: list[RunPlan], hosts: list[Host]) -> None:
    """Every plan fits at least one chosen host, else a SpecError before any host is touched."""
    for plan in plans:
        if plan.nodes > 1:
            continue  # the gang's (`gang.check_fits`)
        if not any(able(h, plan) for h in hosts):
            have = ", ".join(f"{h.name} ({h.gpus} GPUs)" for h in hosts)
            raise SpecError(f"variant '{plan.variant}' needs tp_size={plan.tp_size} GPUs; no chosen host has "
                            f"that many: {have}")


class Queue:
    def __init__(self, plans: list[RunPlan], single_host_only: bool = False):
        # `single_host_only`: plans over several hosts are the gang's (`gang.py`), not the queue's
        self.pending = [Entry(i, plan) for i, plan in enumerate(plans) if plan.nodes == 1 or not single_host_only]
        self.lost: dict[str, OrchError] = {}  # hosts that went away, with why
        self.stopped: OrchError | None = None  # the experiment's own error: no host takes another plan
        self._running = 0
        self._serving: Counter[str] = Counter()  # server keys of the plans running now
        self._changed = asyncio.Condition()

    async def take(self, host: Host, slots: Slots) -> tuple[Entry, Lease] | None:
        """The next entry that fits `host` now, with its lease; None when the host is done."""
        async with self._changed:
            while host.name not in self.lost and self.stopped is None:
                fitting = [e for e in self.pending if able(host, e.plan)]
                for entry in sorted(fitting, key=self._preference):
                    lease = slots.lease(entry.plan)
                    if lease is not None:
                        self._start(entry)
                        return entry, lease
                if not fitting and not self._running:
                    return None
                await self._changed.wait()
            return None

    def _preference(self, entry: Entry) -> tuple[bool, int]:
        """Plans whose server key no run is using now first, then the widest (first fit by
        decreasing size packs GPU slots far better than plan order: a tp-8 plan left to the end
        waits for a host to drain while the smaller ones could have filled around it); plan order
        among equals (a stable sort)."""
        return self._serving[entry.plan.server_key] > 0, -entry.plan.tp_size

    async def take_same(self, host: Host, server_key: str) -> Entry | None:
        """The next pending plan of `server_key` that fits `host`, reserved for the server a run of
        that key leaves up (its slot fits it: the same GPUs and patch set); None when there is none."""
        async with self._changed:
            if not server_key or host.name in self.lost or self.stopped is not None:
                return None
            entry = next((e for e in self.pending if e.plan.server_key == server_key and able(host, e.plan)), None)
            if entry is not None:
                self._start(entry)
            return entry

    def _start(self, entry: Entry) -> None:
        self.pending.remove(entry)
        self._running += 1
        self._serving[entry.plan.server_key] += 1

    async def finished(self, entry: Entry, back: bool = False) -> None:
        """`entry`'s run ended and its slot goes on with the next plan of its server; `back`: it was
        reserved and never ran (it goes back to the front of the queue)."""
        async with self._changed:
            self._end(entry)
            if back:
                self.pending.insert(0, entry)
            self._changed.notify_all()

    def _end(self, entry: Entry) -> None:
        self._running -= 1
        self._serving[entry.plan.server_key] -= 1

    async def done(self, slots: Slots, lease: Lease, entry: Entry, retry: Entry | None = None) -> None:
        """`entry`'s run ended and so did its slot's chain: the slot is free, and a retry (if any)
        goes to the front of the queue."""
        async with self._changed:
            slots.release(lease)
            self._end(entry)
            if retry is not None:
                self.pending.insert(0, retry)
            self._changed.notify_all()

    async def stop(self, error: OrchError) -> None:
        """No host takes another plan: the experiment itself is wrong (`owncheck.py`); the first error wins."""
        async with self._changed:
            self.stopped = self.stopped or error
            self._changed.notify_all()

    async def lose(self, host: str, error: OrchError) -> None:
        """`host` takes no more plans; the others are woken to take what it would have."""
        async with self._changed:
            self.lost.setdefault(host, error)
            self._changed.notify_all()

    def left(self, hosts: list[Host]) -> list[tuple[Entry, str, OrchError]]:
        """The entries no host ran, each with a host that could have and why it went away (every
        host that could run an entry takes it unless it went away: `check_fits` saw one)."""
        left = []
        for entry in self.pending:
            name = next(h.name for h in hosts if h.name in self.lost and able(h, entry.plan))
            left.append((entry, name, self.lost[name]))
        return left
