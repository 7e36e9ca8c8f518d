"""Cleaning up after commands that died on a host: stale locks, servers left running, patches
left applied, runs left `running`. Called holding the host lock, before any new work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import drift, server
from orchestrator.core import patching, shell
from orchestrator.engines.base import Say
from orchestrator.errors import OrchError
from .journal import APPLIED, REVERTED, PatchRecord
from .lock import Holder
from .session import HostSession
from orchestrator.core.clock import now
from orchestrator.store.reading import INTERRUPTED, RUNNING

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Run, Store


@dataclass(frozen=True)
class Recovery:
    """What `recover` cleaned up on a host before this command's work."""

    host: str
    broken: tuple[Holder, ...] = ()
    interrupted: tuple[str, ...] = ()  # uids of runs a dead controller left `running`
    reverted: tuple[PatchRecord, ...] = ()
    restored: tuple[PatchRecord, ...] = ()  # baselines put back over files changed since a revert (`force`)

    def notes(self) -> list[str]:
        """One line per act, for the events of the next run on the host."""
        lines = [f"broke a stale lock on {self.host} ({h.broken_because}): " + (h.owner.describe() if h.owner else h.content.strip())
                 for h in self.broken]
        if self.interrupted:
            lines.append(f"marked run(s) {', '.join(self.interrupted)} interrupted: their controller died")
        if self.reverted:
            states = ", ".join(f"{r.run}#{r.seq} {r.file}: {r.state}" for r in self.reverted)
            lines.append(f"reverted {len(self.reverted)} patch(es) left on {self.host}: {states}")
        if self.restored:
            lines.append(f"restored {len(self.restored)} file(s) changed since orch's revert on {self.host}: "
                         + ", ".join(f"{r.file}: {r.state}" for r in self.restored))
        return lines


async def recover(session: HostSession, store: Store, report: Say, *, force: bool = False,
                  broken: list[Holder] | tuple[Holder, ...] = ()) -> Recovery:
    """Clean up after commands that died on this host (call it holding the host lock): warn about
    the stale locks broken, stop servers they left running, revert the patches they left applied
    and mark their runs interrupted with the reason. `force` also restores drifted files (files
    that changed after orch patched them, or since its revert left them: `drift.py`), each shown
    first with the change being undone."""
    from orchestrator.store import database as store_queries
    name = session.host.name
    if force:
        await _show_drift(session, report)
    dead: dict[str, str] = {}  # run uid -> why its controller is known to be dead
    for holder in broken:
        who = holder.owner.describe() if holder.owner else repr(holder.content.strip())
        report(name, f"warning: broke a stale lock ({holder.broken_because}): {who}")
        if holder.owner is not None:
            owner = holder.owner
            for run in store_queries.running_runs(store, name, f"{owner.controller}:{owner.pid}", owner.started_at):
                dead[run.uid] = f"its lock on {name} was found stale ({holder.broken_because})"
                store.event(run, "lock-broken", f"a later command broke its stale lock on {name}: {holder.broken_because}")
    leftovers = await session.journal.records()
    for record in leftovers:
        dead.setdefault(record.run, f"it left patches applied on {name}")
    if leftovers:
        report(name, f"reverting {len(leftovers)} patch(es) left applied by run(s) {', '.join(sorted({r.run for r in leftovers}))}")
    # every server still up under this host's runs: none belongs to a live command (this one holds
    # the lock), whatever its run says (a run marked ended may have left its server holding the port)
    left_up = await _live_servers(session)
    stopped = await _stop_leftover_servers(session, sorted(set(dead) | set(left_up)), report)
    for uid in stopped:
        _note(store, uid, "recovered", f"a later command on {name} stopped the server it left running")
    reverted = await session.journal.revert(force=force) if leftovers else []
    await session.journal.sweep()
    restored = await drift.restore(session, report) if force else []  # after the journal's: it sets baselines
    # none left at the start: none now (the lock is ours, and the sweep removes no record)
    still_journaled = {(r.run, r.seq) for r in await session.journal.records()} if leftovers else set()
    interrupted = []
    for uid, why in sorted(dead.items()):
        try:
            old = store.get(uid)
        except OrchError:
            continue  # recorded in another database
        node = store.node_of(old, name)  # a run over several hosts: this host's rows only
        states = {r.seq: r.state for r in reverted if r.run == uid}
        states.update(_finished_reverts(store, old, states, still_journaled, node))
        if states:
            store.set_patch_states(old, states, node)
        store.event(old, "recovered", f"cleaned up by a later command on {name}; patch states: {states or 'none left'}")
        if old.status == RUNNING:
            interrupted.append(uid)
            left = "its patches were reverted by that command" if states else "it left no patches applied"
            store.update_run(old, status=INTERRUPTED, ended_at=now(),
                             error=f"the controller {old.controller} died before the run ended: {why}; {left}")
    return Recovery(name, tuple(broken), tuple(interrupted), tuple(reverted), tuple(restored))


def _finished_reverts(store: Store, run: Run, states: dict[int, str], journaled: set[tuple[str, int]],
                      node: int = 0) -> dict[int, str]:
    """Patches the database still calls applied whose journal record is gone: the journal deletes a
    record only once the restored file's hash equals `before`, so their revert finished (the
    controller died before it could record that)."""
    from orchestrator.store.database import PatchRow
    rows = store.children(run, PatchRow)
    return {r.seq: REVERTED for r in rows
            if r.node == node and r.state == APPLIED and r.seq not in states and (run.uid, r.seq) not in journaled}


async def _show_drift(session: HostSession, report: Say) -> None:
    for record in await session.journal.records():
        if record.state != "drifted":
            continue
        try:
            current = (await session.conn.read_file(record.file)).decode(errors="replace")
        except FileNotFoundError:
            current = ""
        original = (await session.conn.read_file(record.backup)).decode(errors="replace")
        report(session.host.name, f"restoring {record.file}; the change being undone:\n"
               + patching.unified(original, current, record.file.lstrip("/")))


async def _live_servers(session: HostSession) -> list[str]:
    """The run folders whose server has a live process, by the pid each folder recorded."""
    done = await session.conn.run(shell.live_run_folders(f"{session.host.workdir}/runs"), idempotent=True)
    return [line for line in done.out.splitlines() if shell.RUN_UID.fullmatch(line)]


def _note(store: Store, uid: str, kind: str, message: str) -> None:
    try:
        store.event(store.get(uid), kind, message)
    except OrchError:
        pass  # a run of another database


async def _stop_leftover_servers(session: HostSession, uids: list[str], report: Say) -> list[str]:
    """A dead controller's server keeps its GPUs and port: stop each one that is still up, checked
    by its run mark (never by name); returns the uids whose server was stopped."""
    stopped = []
    for uid in uids:
        run_dir = f"{session.host.workdir}/runs/{uid}"
        try:
            pid = (await session.conn.read_file(f"{run_dir}/pid")).decode().strip()
        except FileNotFoundError:
            continue
        ended = await session.conn.stat(f"{run_dir}/exit_code")
        if not pid.isdigit() or ended is not None or not (await session.conn.run(shell.group_alive(int(pid)))).ok:
            continue
        if not (await session.conn.run(shell.group_started_in(int(pid), run_dir))).ok:
            report(session.host.name, f"warning: pid {pid} in {run_dir}/pid is no longer the server run {uid} "
                   "started (the host restarted, or the pid was reused); left it alone")
            continue
        gone = (await server.stop(session.conn, server.Server(run_dir, int(pid), 0))).gone
        stopped.append(uid)
        report(session.host.name, f"stopped the server run {uid} left running (pid {pid})" if gone
               else f"warning: the server run {uid} left running (pid {pid}) survived SIGKILL")
    return stopped
