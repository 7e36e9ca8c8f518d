"""`orch stop RUN | --sweep RUN | --host H | --all`: stop the servers orch started, revert their
patches, record why.

A run whose controller is a live `orch run` on this machine is stopped by that controller: `orch
stop RUN` asks it to stop that run alone, and the sweep goes on (`runstop.py`); the other forms
send it SIGTERM, and it does its own cleanup (cli/interrupt.py), which this waits for. Everything else (a
controller that died, servers left up) is cleaned up here under the host lock: the host
lifecycle's recovery stops every server found by its run mark under the host's runs and reverts
the journal; the runs it ends are marked `interrupted`, "stopped by orch stop"."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core.inventory import Host
from orchestrator.engines.base import Say
from orchestrator.errors import OrchError
from orchestrator.host import lifecycle, server
from . import runstop

if TYPE_CHECKING:
    from orchestrator.store.database import Run, Store

WHY = "stopped by orch stop"
CLEANUP_BOUND_S = server.STOP_GRACE_SECONDS + 30  # a controller's own cleanup: every server's grace, then the reverts


async def stop_runs(store: Store, chosen: Sequence[Host], target: Run | None,
                    say: Say) -> dict[str, list[str] | OrchError]:
    """Stop `target` (or every run and server of the `chosen` hosts): live controllers by SIGTERM,
    the rest under each host's lock. Per host, a line for each run it interrupted, or its error."""
    from orchestrator.store.database import RUNNING

    names = {h.name for h in chosen}
    running = [r for r in store.runs(status=RUNNING) if r.host in names and (target is None or r.uid == target.uid)]
    for pid, runs in _live_controllers(running).items():
        if target is not None:  # that run alone: its sweep goes on, holding the host (`runstop.py`)
            return {target.host: await runstop.ask(store, pid, target, say, CLEANUP_BOUND_S + 15)}
        await _stop_controller(store, pid, runs, say)
    if target is not None and target.status != RUNNING and target.uid not in {r.uid for r in running}:
        say(target.host, f"run {target.uid} is {target.status}; stopping what it may have left")

    async def one(held: lifecycle.Held) -> list[str]:  # the lifecycle's recovery stopped and reverted what was left
        assert held.recovery is not None
        return _record(store, held, target)

    return await lifecycle.on_hosts(chosen, one, say, lifecycle.Locking("stop", store))


def sweep_hosts(store: Store, ref: str) -> list[str]:
    """The hosts where the sweep of run `ref` (id, uid or `last`: its `orch run`) has runs going
    now, or that run's own host when none: `orch stop --sweep` stops every run there."""
    from orchestrator.store.database import RUNNING

    run = store.get(ref)  # an unknown run: exit 2
    going = [r.host for r in store.runs(status=RUNNING) if r.controller == run.controller]
    return list(dict.fromkeys(going)) or [run.host]


def _record(store: Store, held: lifecycle.Held, target: Run | None) -> list[str]:
    """Mark what recovery ended, and runs still `running` on the host (no live command holds it now:
    this one has its lock), interrupted by orch stop."""
    from orchestrator.core.clock import now
    from orchestrator.store.database import INTERRUPTED, RUNNING

    assert held.recovery is not None
    host = held.session.host.name
    lines = []
    ended = {uid for uid in held.recovery.interrupted if target is None or uid == target.uid}
    for run in store.runs(status=RUNNING):
        if run.host == host and (target is None or run.uid == target.uid):
            store.update_run(run, status=INTERRUPTED, ended_at=now(), error=f"{WHY}: its controller {run.controller} "
                             "was not running it any more")
            ended.add(run.uid)
    for uid in sorted(ended):
        run = store.get(uid)
        store.event(run, "stopped", f"{WHY} on {host}: server stopped, patches reverted")
        if WHY not in (run.error or ""):
            store.update_run(run, error=f"{WHY}; {run.error}" if run.error else WHY)
        lines.append(f"run {uid} interrupted ({WHY})")
    return lines


def _live_controllers(runs: list[Run]) -> dict[int, list[Run]]:
    """The runs whose controller is a live `orch run` process on this machine, by its pid."""
    found: dict[int, list[Run]] = {}
    here = socket.gethostname()
    for run in runs:
        name, _, pid = (run.controller or "").rpartition(":")
        if name == here and pid.isdigit() and int(pid) != os.getpid() and _is_orch_run(int(pid)):
            found.setdefault(int(pid), []).append(run)
    return found


def _is_orch_run(pid: int) -> bool:
    """Whether `pid` is an `orch run` process (its command line), alive and not a zombie."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    orch = any(Path(a).name == "orch" or "orchestrator" in a for a in argv)
    return state not in ("Z", "X") and orch and "run" in argv


async def _stop_controller(store: Store, pid: int, runs: list[Run], say: Say) -> None:
    """SIGTERM to a live `orch run`, then wait for it to stop its servers and revert its patches."""
    uids = ", ".join(r.uid for r in runs)
    say(runs[0].host, f"run(s) {uids} are run by `orch run` pid {pid}: sent it SIGTERM; waiting for its cleanup")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + CLEANUP_BOUND_S + 15
    while _is_orch_run(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    if _is_orch_run(pid):
        say(runs[0].host, f"warning: `orch run` pid {pid} is still cleaning up after {CLEANUP_BOUND_S + 15:.0f} s; "
            "what it leaves is stopped here once its lock is free")
    for run in runs:
        run = store.get(run.uid)
        store.event(run, "stopped", f"{WHY}: SIGTERM to its controller, `orch run` pid {pid}")
        if run.status != "running":
            store.update_run(run, error=f"{WHY} (SIGTERM to its controller pid {pid}); {run.error}")
