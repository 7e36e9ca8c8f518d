"""GPU slots: the runs one host runs at once, each on its own GPUs and its own port.

A run of `tp_size` ranks leases `tp_size` of the host's free GPUs (the lowest free indices) and a
slot index (the lowest index no run on the host holds now). What the run sees of its slot:

- `CUDA_VISIBLE_DEVICES` (the env) and `{{ gpus }}` (a param): its GPUs, e.g. "4,5,6,7"; set only
  when the run takes fewer GPUs than the host has (a run of the whole host sees every GPU anyway);
- `{{ port }}`: the plan's port + the slot index, or the next one up when another run on the host
  holds that one or, for a slot past the first, another process listens there (`execute`); slot 0
  keeps the plan's port, which run_one's port check refuses when taken, as without slots.

Runs share a host at once only when their patch sets are identical (the same patch names and
contents, in the same order): the files they import are then the same, applied once and reverted
when the last run of the set ends (`sharing.py`). A run with another patch set waits until the host
has drained. A run that cannot be given its own GPUs runs alone: on a host without a GPU count,
or when its env sets `CUDA_VISIBLE_DEVICES` itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator import remote
from orchestrator.core.inventory import Host
from orchestrator.core.spec import PatchDef, RunPlan

DEFAULT_PORT = 30000


def tp_size(plan: RunPlan) -> int:
    return int(plan.params.get("tp_size", 1) or 1)


def able(host: Host, plan: RunPlan) -> bool:
    """Could `host` ever run `plan`: enough GPUs for its tensor-parallel size. `gpus: 0` on this
    machine itself (no rehearsal) means "not counted", not "none"."""
    return host.gpus >= tp_size(plan) or host.gpus == 0 and remote.is_this_machine(host) and not host.rehearsal


@dataclass(frozen=True)
class Lease:
    """One run's share of a host: slot index, GPUs (empty: the whole host) and port."""

    index: int
    gpus: tuple[int, ...]
    port: int | None  # None: the plan's own port (it runs alone)
    patches: tuple[PatchDef, ...]
    alone: bool  # the run holds the whole host

    def plan(self, plan: RunPlan) -> RunPlan:
        """The plan as the slot runs it: its port, and its GPUs when it does not hold them all."""
        params, env = dict(plan.params), dict(plan.env)
        if self.port is not None:
            params["port"] = self.port
        if self.gpus:
            params["gpus"] = env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        return dataclasses.replace(plan, params=params, env=env)


class Slots:
    """One host's GPUs and the leases on them now (one event loop: no locking needed)."""

    def __init__(self, host: Host):
        self.host = host
        self.leases: list[Lease] = []

    @property
    def idle(self) -> bool:
        return not self.leases

    def lease(self, plan: RunPlan) -> Lease | None:
        """A lease for `plan` if it can start now, else None (wait for a run to end)."""
        if self.leases and (self.leases[0].alone or self.leases[0].patches != plan.patches):
            return None  # a run holding the whole host, or another patch set: wait for the host to drain
        if self._alone(plan):
            if self.leases:
                return None
            self.leases.append(Lease(0, (), None, plan.patches, True))
            return self.leases[0]
        taken = {g for lease in self.leases for g in lease.gpus}
        free = [g for g in range(self.host.gpus) if g not in taken]
        tp = tp_size(plan)
        if len(free) < tp:
            return None
        index = min(set(range(len(self.leases) + 1)) - {lease.index for lease in self.leases})
        gpus = tuple(free[:tp]) if tp < self.host.gpus else ()
        lease = Lease(index, gpus, self._port(plan, index), plan.patches, False)
        self.leases.append(lease)
        return lease

    def release(self, lease: Lease) -> None:
        self.leases.remove(lease)

    def moved(self, lease: Lease, port: int) -> Lease:
        """`lease` on `port` instead (its own was taken by another process)."""
        held = self._held()
        while port in held:
            port += 1
        moved = dataclasses.replace(lease, port=port)
        self.leases[self.leases.index(lease)] = moved
        return moved

    def _alone(self, plan: RunPlan) -> bool:
        return self.host.gpus <= 0 or "CUDA_VISIBLE_DEVICES" in plan.env

    def _held(self) -> set[int | None]:
        return {lease.port for lease in self.leases}

    def _port(self, plan: RunPlan, index: int) -> int:
        held = self._held()
        port = int(plan.params.get("port", DEFAULT_PORT)) + index  # a whole number: plancheck saw to it
        while port in held:
            port += 1
        return port
