"""GPU slots: the runs one host runs at once, each on its own GPUs and its own port.

A run of `tp_size` ranks leases `tp_size` of the host's free GPUs (the lowest free indices) and a
slot index (the lowest index no run on the host holds now). What the run sees of its slot:

- `CUDA_VISIBLE_DEVICES` (the env) and `{{ gpus }}` (a param): its GPUs, e.g. "4,5,6,7"; set only
  when the run takes fewer GPUs than the host has (a run of the whole host sees every GPU anyway);
- `{{ port }}`: the plan's port + the slot index, or the next one up when another run on the host
  holds that one or, for a slot past the first, another process listens there (`execute`); slot 0
  keeps the plan's port, which run_one's port check refuses when taken, as without slots.

Runs with different patch sets share a host at once and never see each other's patches:
- the first run on an idle host applies its patches to the installed files (the journal), and
  runs with the identical set (the same patch names and contents, in the same order) join it:
  applied once, reverted when the last run of the set ends (`sharing.py`);
- a run with another set is *isolated*: its patches go to its own patched copy of the engine's
  packages under its run folder, first on its PYTHONPATH (`host/overlay.py`; the `patched_site`
  param, `{{ patched_site }}` in a template), and the installed files stay as they are. Its copy
  holds the original text of every file the set applied in place now patches (`sharing.originals`),
  so it sees neither that set nor any other;
- while an isolated run is going, no new set is applied in place (a run with patches is isolated
  then too): the installed files its copy links to never change under it;
- a patch to an absolute path (not `PACKAGE:relative/path`) cannot go to a copy: a run with one
  waits until the host has drained, unless its set is the one applied in place now; while such a
  set is applied in place, a run of another set waits too.
A run that cannot be given its own GPUs runs alone: on a host without a GPU count, or when its env
sets `CUDA_VISIBLE_DEVICES` itself.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass

from orchestrator import remote
from orchestrator.core.inventory import Host
from orchestrator.core.spec import PatchDef, RunPlan, port_of
from orchestrator.host import overlay


def able(host: Host, plan: RunPlan) -> bool:
    """Could `host` ever run `plan`: enough GPUs for its tensor-parallel size (its share of it, for a
    run over several hosts). `gpus: 0` on this machine itself (no rehearsal) means "not counted", not "none"."""
    return host.gpus >= -(-plan.tp_size // plan.nodes) or host.gpus == 0 and remote.is_this_machine(host) and not host.rehearsal


@dataclass(frozen=True)
class Lease:
    """One run's share of a host: slot index, GPUs (empty: the whole host) and port."""

    index: int
    gpus: tuple[int, ...]
    port: int | None  # None: the plan's own port (it runs alone)
    patches: tuple[PatchDef, ...]
    alone: bool  # the run holds the whole host
    isolated: bool = False  # its patches go to its own copy of the packages, not the installed files
    holds: tuple[int, ...] = ()  # the GPUs no other run may take meanwhile (all of them for a whole-host run)

    def plan(self, plan: RunPlan) -> RunPlan:
        """The plan as the slot runs it: its port, and its GPUs when it does not hold them all."""
        params, env = dict(plan.params), dict(plan.env)
        if self.port is not None:
            params["port"] = self.port
        if self.gpus:
            params["gpus"] = env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        if self.isolated:
            params[overlay.PARAM] = overlay.FOLDER
        return dataclasses.replace(plan, params=params, env=env)


_hosts: weakref.WeakValueDictionary[str, Slots] = weakref.WeakValueDictionary()


def in_place(host: str) -> tuple[PatchDef, ...]:
    """The patch set the runs on `host` that patch the installed files run with now (() when none
    does): what an isolated run's copy keeps out (`sharing.originals`)."""
    slots = _hosts.get(host)
    return slots.in_place or () if slots is not None else ()


class Slots:
    """One host's GPUs and the leases on them now (one event loop: no locking needed)."""

    def __init__(self, host: Host):
        self.host = host
        self.leases: list[Lease] = []
        _hosts[host.name] = self  # one sweep's slots per host (the host lock keeps others off it)

    @property
    def idle(self) -> bool:
        return not self.leases

    @property
    def in_place(self) -> tuple[PatchDef, ...] | None:
        """The patch set of the runs using the installed files now (None: no such run)."""
        return next((lease.patches for lease in self.leases if not lease.isolated), None)

    def isolates(self, plan: RunPlan) -> bool | None:
        """How `plan` would patch now: False in place (or it has nothing to patch), True in its own
        copy, None not at all (wait for the host to drain)."""
        if not self.leases or self.in_place == plan.patches:
            return False  # the first run, or one of the set applied in place now (it joins)
        if not plan.patches:
            return None if self.in_place else False  # the installed files as installed: only without a set applied
        # a copy keeps out only patches to package files: both sets must have only those
        return True if overlay.isolatable(plan.patches) and overlay.isolatable(self.in_place or ()) else None

    def lease(self, plan: RunPlan) -> Lease | None:
        """A lease for `plan` if it can start now, else None (wait for a run to end)."""
        if self.leases and self.leases[0].alone:
            return None  # a run holding the whole host: wait for it to end
        isolated = self.isolates(plan)
        if isolated is None:
            return None  # a set that cannot keep out of the installed files: wait for the host to drain
        if self._alone(plan):
            if self.leases:
                return None
            self.leases.append(Lease(0, (), None, plan.patches, True))
            return self.leases[0]
        taken = {g for lease in self.leases for g in lease.holds}
        free = [g for g in range(self.host.gpus) if g not in taken]
        tp = plan.tp_size
        if len(free) < tp:
            return None
        index = min(set(range(len(self.leases) + 1)) - {lease.index for lease in self.leases})
        gpus = tuple(free[:tp]) if tp < self.host.gpus else ()
        lease = Lease(index, gpus, self._port(plan, index), plan.patches, False, isolated, tuple(free[:tp]))
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
        port = port_of(plan.params) + index
        while port in held:
            port += 1
        return port
