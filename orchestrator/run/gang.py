"""How a sweep runs its plans over several hosts (`nodes: N`, `multinode.py`): a gang of hosts.

Kept simple: the plans over several hosts run after every single-host plan of the sweep. A host
whose worker finds no single-host plan left for it (`queue.take` returned None: none fits it and
no run anywhere is still going) joins the gang, whole (no other run on it). The next plan of the
gang, in plan order, starts once N hosts that can run it have joined: the first of them in
inventory order is rank 0 and runs the run (`execute.run_one` with the others' sessions) while the
others wait; each host's lock, recovery and rehearsal install were done by its own lifecycle. After
the run its hosts join again, except one whose link failed for good (it leaves the sweep). A plan
that needs more hosts than are left fails without a run; one that needs more than were chosen is
refused before any host (`check_fits`).

A Slurm entry (`transport: slurm`) joins as one member that stands for all the nodes of its job
(`sized`: the sweep asks for as many as its widest plan there), and runs a plan over several nodes
alone, on the first nodes of that job (rank 0 the first). Why whole, not one member per node: one
sbatch of N nodes lets Slurm grant them at once and together (its topology, one queue wait, one
scancel), where N one-node jobs would each wait on its own, hold granted nodes idle while the
others queue, and could deadlock two sweeps each holding half; and a cluster's nodes reach each
other's rendezvous, not necessarily an SSH host outside it, so a Slurm node never joins a gang of
other hosts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from orchestrator.core.inventory import Host
from orchestrator.core.spec import RunPlan
from orchestrator.errors import HostError, OrchError, SpecError
from orchestrator.host.lifecycle import Held
from orchestrator.store.reading import FAILED
from . import multinode
from .execute import Outcome
from .slots import able

Run = Callable[[RunPlan, list[Held]], Awaitable[tuple[Outcome, list[str]]]]  # the outcome, and the hosts lost


def sized(hosts: list[Host], plans: list[RunPlan]) -> list[Host]:
    """Each Slurm entry asks for as many nodes as the widest plan it can run (one job of them all)."""
    def nodes(host: Host) -> int:
        return max([1, *(p.nodes for p in plans if able(host, p))])
    return [dataclasses.replace(h, slurm=dataclasses.replace(h.slurm, nodes=nodes(h))) if h.slurm else h
            for h in hosts]


def places(host: Host) -> int:
    """How many nodes of a run the host stands for: a Slurm entry all its job's, any other one."""
    return host.slurm.nodes if host.slurm is not None else 1


def group(names: list[str], hosts: dict[str, Host], plan: RunPlan) -> list[str]:
    """The hosts among `names` (rank order) that run `plan` next: a Slurm entry with nodes enough
    alone, or the first `plan.nodes` other hosts; whichever comes first. [] when neither fits."""
    whole = [n for n in names if hosts[n].slurm is not None and places(hosts[n]) >= plan.nodes]
    loose = [n for n in names if hosts[n].slurm is None]
    options = [g for g in (whole[:1], loose[:plan.nodes] if len(loose) >= plan.nodes else []) if g]
    return min(options, key=lambda g: names.index(g[0])) if options else []


def check_fits(plans: list[RunPlan], hosts: list[Host]) -> None:
    """Every plan over several hosts has that many chosen hosts able to run its share (or one Slurm
    entry that many nodes: `sized`), else a SpecError before any host is touched."""
    hosts = sized(hosts, plans)
    named = {h.name: h for h in hosts}
    for plan in plans:
        if plan.nodes > 1:
            multinode.gpus_per_node(plan)  # tp_size splits over the nodes
            fit = [h.name for h in hosts if able(h, plan)]
            if not group(fit, named, plan):
                raise SpecError(f"variant '{plan.variant}' needs nodes={plan.nodes} hosts; the chosen hosts that can "
                                f"run its share have {len(fit)}: {', '.join(fit) or 'none'}; choose more (--hosts)")


class Gang:
    def __init__(self, entries: list[tuple[int, RunPlan]], hosts: list[Host]):
        self.pending = list(entries)  # (place in the sweep, plan), in plan order
        self._hosts = {h.name: h for h in hosts}
        self._rank = {h.name: i for i, h in enumerate(hosts)}
        self._present = set(self._hosts)  # hosts that are in the gang or may still join it
        self._idle: dict[str, Held] = {}
        self._gone: set[str] = set()
        self._changed = asyncio.Condition()

    async def take_part(self, held: Held, run: Run) -> list[tuple[int, Outcome]]:
        """The host waits in the gang; runs the plans it is rank 0 of; returns their outcomes once
        no plan is left for it (or its link failed for good)."""
        name = held.session.host.name
        outcomes: list[tuple[int, Outcome]] = []
        async with self._changed:
            self._idle[name] = held
            self._changed.notify_all()
        while True:
            async with self._changed:
                started = await self._next(name, outcomes)
            if started is None:
                return outcomes
            (order, plan), group = started
            try:
                outcome, lost = await run(plan, list(group.values()))  # rank order
            except OrchError as exc:
                outcome, lost = Outcome(None, "-", plan.variant, name, FAILED, error=str(exc), evidence=exc.evidence,
                                        exit_code=exc.exit_code), []
            finally:
                async with self._changed:
                    for member, member_held in group.items():
                        if member not in lost:
                            self._idle[member] = member_held
                    self._changed.notify_all()
            outcomes.append((order, outcome))
            for member in lost:
                await self.leave(member)
            if name in lost:
                return outcomes

    async def _next(self, name: str, outcomes: list[tuple[int, Outcome]]
                    ) -> tuple[tuple[int, RunPlan], dict[str, Held]] | None:
        """Under the lock: wait until this host is rank 0 of the next plan (returns it and its hosts,
        rank order), or no plan is left for it (None)."""
        while True:
            if name in self._gone:
                return None
            if not self.pending and name in self._idle:
                self._idle.pop(name)
                self._present.discard(name)
                self._changed.notify_all()
                return None
            if self.pending and name in self._idle:
                order, plan = self.pending[0]
                able_left = sorted((n for n in self._present if able(self._hosts[n], plan)), key=self._rank.__getitem__)
                if not group(able_left, self._hosts, plan):  # hosts went away: it cannot run any more
                    self.pending.pop(0)
                    error = HostError(f"variant '{plan.variant}' needs nodes={plan.nodes} hosts; {len(able_left)} of "
                                      "the chosen ones are left in the sweep (the others left it: see their lines "
                                      "above); run it again once they answer (`orch hosts check`)")
                    outcomes.append((order, Outcome(None, "-", plan.variant, name, FAILED, error=str(error),
                                                    exit_code=error.exit_code)))
                    self._changed.notify_all()
                    continue
                ready = sorted((n for n in self._idle if able(self._hosts[n], plan)), key=self._rank.__getitem__)
                chosen = group(ready, self._hosts, plan)
                if chosen and chosen[0] == name:
                    self.pending.pop(0)
                    return (order, plan), {n: self._idle.pop(n) for n in chosen}
            await self._changed.wait()

    async def leave(self, name: str) -> None:
        """`name` is in the gang no more (its lifecycle ended, or failed before it joined)."""
        async with self._changed:
            self._present.discard(name)
            self._idle.pop(name, None)
            self._gone.add(name)
            self._changed.notify_all()
