"""A sweep: hosts in parallel, each taking its runs from one queue (`queue.py`) and running as many
at once as its GPU slots hold (`slots.py`); a run that ends well hands its server to the next plan
of the same server key (`serving.py`). One run's stages are `execute.run_one`'s.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator import engines
from orchestrator.core.inventory import Host
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.engines.base import Engine
from orchestrator.errors import EXIT_RUN_FAILED, HostError, OrchError
from orchestrator.host import lifecycle, occupancy
from orchestrator.host.lifecycle import Held, Locking
from orchestrator.host.session import HostSession
from orchestrator.remote import slurm
from orchestrator.remote.group import uncancelled
from orchestrator.store.reading import FAILED, SUCCEEDED
from . import gang, multinode, owncheck, runstop, serving
from .attempt import Reporter
from .departures import Departures
from .execute import Outcome, controller, dry_run_nodes, dry_run_one, run_one
from .queue import Entry, Queue, check_fits
from .slots import Lease, Slots, able

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import Store


def schedule(plans: list[RunPlan], hosts: list[Host]) -> dict[str, list[RunPlan]]:
    """Each plan on the least-loaded host with enough GPUs for it: where `orch check` looks at it
    (a run takes its plans from one queue instead, `run_all`)."""
    check_fits(plans, hosts)
    queues: dict[str, list[RunPlan]] = {h.name: [] for h in hosts}
    for plan in plans:
        target = min((h for h in hosts if able(h, plan)), key=lambda h: len(queues[h.name]))
        queues[target.name].append(plan)
    return {name: queue for name, queue in queues.items() if queue}


async def run_all(
    spec: Spec, plans: list[RunPlan], hosts: list[Host], store: Store, reporter: Reporter, *, dry_run: bool = False,
    left: dict[str, OrchError] | None = None,
) -> list[Outcome]:
    """Hosts in parallel (one lifecycle each, `host/lifecycle.py`), each taking its runs from one
    queue and running as many at once as its GPU slots hold (`slots.py`); outcomes in plan order.
    `left` is filled with the hosts that left the sweep and why, each said when it left
    (`departures.py`): the sweep then exits 3."""
    check_fits(plans, hosts)
    gang.check_fits(plans, hosts)
    # a plan over several hosts runs (or is dry-run: every node's part) on the hosts its gang chooses
    spread = [(i, plan) for i, plan in enumerate(plans) if plan.nodes > 1]
    if spread and not dry_run:  # a dry run checks rank 0's part there: one node
        hosts = gang.sized(hosts, plans)  # a Slurm entry's one job holds the nodes of its widest plan
    queue = Queue(plans, single_host_only=bool(spread))
    engine = engines.get(spec.engine)
    # a dry run changes nothing, so it needs no lock and recovers nothing; a run's lease names its run
    locking = None if dry_run else Locking("run", store, lease_note=lambda host: _current_run(store, host),
                                           wait_s=spec.lock_wait_s)
    team = gang.Gang(spread, gang.sized(hosts, plans)) if spread else None
    departures = Departures(queue, hosts, reporter, left)
    worker = _Sweep(spec, engine, queue, store, reporter, dry_run, team, departures).on_host
    results = await departures.on_hosts(hosts, worker, reporter.message, locking, engine,
                                        ended=team.leave if team is not None else None)
    if queue.stopped is not None:  # the experiment's own error: one line, no run recorded for any plan
        return [Outcome(None, "-", plan.variant, "-", FAILED, error=str(queue.stopped), exit_code=queue.stopped.exit_code)
                for plan in plans]
    done: list[tuple[int, Outcome]] = []
    for name, result in results.items():
        if isinstance(result, OrchError):
            queue.lost.setdefault(name, result)
        else:
            done.extend(result)
    for entry, name, error in queue.left(hosts):  # every host that could run them went away
        done.append((entry.order, Outcome(None, "-", entry.plan.variant, name, FAILED, error=str(error),
                                          exit_code=error.exit_code)))
    return [outcome for _, outcome in sorted(done, key=lambda d: d[0])]


SLOT_PORT_TRIES = 16


async def _spread_dry_run(spec: Spec, reporter: Reporter, plan: RunPlan, members: list[Held]) -> tuple[Outcome, list[str]]:
    """The dry run of one plan over several hosts, on `members` (rank order): no host is lost by it."""
    return await dry_run_nodes(spec, plan, [held.session for held in members], reporter), []


async def _spread_run(spec: Spec, engine: Engine, store: Store, reporter: Reporter, departures: Departures,
                      plan: RunPlan, members: list[Held]) -> tuple[Outcome, list[str]]:
    """One plan over several hosts (`multinode.py`), rank 0 on the first of `members` (a Slurm
    entry alone: the first nodes of its job, `gang.py`): the same engine version on all of them
    checked first; returns its outcome and the hosts whose link failed for good during it."""
    sessions = [held.session for held in members]
    job = slurm.job_of(sessions[0].conn)
    if job is not None:
        sessions += await lifecycle.job_nodes(sessions[0], plan.nodes, reporter.message, engine)
    try:
        if job is not None:
            await lifecycle.own_files(sessions, plan.patches)  # a file on shared storage is refused
        # a job's nodes meet at rank 0's address as Slurm reaches it (its NodeAddr)
        dist_host = job.address(job.nodes[0]) if job is not None else multinode.address(sessions[0].host)
        nodes = await multinode.meeting(sessions, engine, dist_host)
        outcome = await run_one(spec, plan, sessions[0], store, reporter, nodes=nodes)
    finally:
        for sibling in sessions[len(members):]:
            await uncancelled(sibling.close())
    if outcome.run_id is not None and job is not None:
        store.event(store.get(str(outcome.run_id)), "slurm-job", job.describe())  # where the run ran
    lost = []
    for session in sessions[:len(members)]:
        try:
            await session.conn.stat(session.host.workdir)
        except (OrchError, OSError) as exc:
            lost.append(session.host.name)
            name = session.host.name
            await departures.leave(name, HostError(f"{name}: the link failed for good ({exc})"))
    return outcome, lost


@dataclass
class _Sweep:
    """What every host's worker shares in one sweep: the experiment, its queue, the store, the gang
    that runs the plans over several hosts."""

    spec: Spec
    engine: Engine
    queue: Queue
    store: Store
    reporter: Reporter
    dry_run: bool
    team: gang.Gang | None
    departures: Departures

    async def on_host(self, held: Held) -> list[tuple[int, Outcome]]:
        """One host's part: the experiment's own errors once (a dry run too: it only reads), its
        runs, then its part in the gang when no single-host plan is left for it."""
        mine = [e.plan for e in self.queue.pending if able(held.session.host, e.plan)]
        problem = await owncheck.first_error(self.spec, mine, held.session)
        if problem is not None:
            await self.queue.stop(problem)
            return []
        done = await _HostWorker(self, held).run()
        if self.team is not None:
            spread_run = (functools.partial(_spread_dry_run, self.spec, self.reporter) if self.dry_run
                          else functools.partial(_spread_run, self.spec, self.engine, self.store, self.reporter,
                                                 self.departures))
            done += await self.team.take_part(held, spread_run)
        return done


class _HostWorker:
    """Runs taken from the queue while some fit the host, each in its slot as its own task; a
    cancel reaches every one of them (each cleans up its own run)."""

    def __init__(self, sweep: _Sweep, held: Held):
        self.sweep, self.held, self.session, self.queue = sweep, held, held.session, sweep.queue
        self.slots = Slots(held.session.host)
        self.notes = held.recovery.notes() if held.recovery is not None else []  # told by the first run
        self.outcomes: list[tuple[int, Outcome]] = []

    async def run(self) -> list[tuple[int, Outcome]]:
        tasks: set[asyncio.Task[None]] = set()
        try:
            while (taken := await self.queue.take(self.session.host, self.slots)) is not None:
                tasks.add(asyncio.create_task(self._chain(*taken)))
        except asyncio.CancelledError as exc:
            for task in tasks:
                task.cancel(*exc.args)  # the reason (a signal's name) goes with it
            if tasks:
                await asyncio.wait(tasks)
            raise
        if tasks:
            await asyncio.wait(tasks)  # done already, unless the host was lost with runs going
        for task in tasks:
            task.result()  # a bug in one run is raised, not dropped
        return self.outcomes

    async def _chain(self, entry: Entry, lease: Lease) -> None:
        """The entry's run in its slot, then each plan of the same server key the queue hands on to
        the server it leaves up (`serving.py`); the slot is freed when the chain ends."""
        kept, retry = serving.Kept(), None
        current = entry
        try:
            lease = await _slot_port(self.session, self.slots, lease)
            while True:
                retry = await self._plan(current, lease, kept)
                if kept.next is None:
                    break
                await self.queue.finished(current)  # the slot stays held for the next plan of its server
                current, kept.next = kept.next, None
        finally:
            if kept.serving is not None:  # left up for a plan that did not become a run, or cut short
                await uncancelled(serving.close(kept.serving))
            if kept.next is not None:  # reserved for the server, never run: back to the queue
                await self.queue.finished(kept.next, back=True)
            await self.queue.done(self.slots, lease, current, retry)

    async def _keep(self, kept: serving.Kept, entry: Entry) -> bool:
        """Does another plan of the entry's server key take its server now? (reserved in `kept`)"""
        kept.next = await self.queue.take_same(self.session.host, entry.plan.server_key)
        return kept.next is not None

    async def _plan(self, entry: Entry, lease: Lease, kept: serving.Kept) -> Entry | None:
        """One plan's run (or dry run) and its outcome; returns its retry when the host's link failed."""
        sweep, session = self.sweep, self.session
        plan = lease.plan(entry.plan)
        try:
            if sweep.dry_run:
                self.outcomes.append((entry.order, await dry_run_one(sweep.spec, plan, session, sweep.reporter)))
                return None
            with runstop.STOPS.running(session.host.name, entry.plan.key):  # `orch stop RUN` finds it
                keep = functools.partial(self._keep, kept, entry)
                outcome = await _stoppable(run_one(sweep.spec, plan, session, sweep.store, sweep.reporter, kept, keep),
                                           sweep.store, entry.plan.variant, session.host.name)
            self._told(outcome)
            await self._lock_kept(outcome)
            retry = await _lost_link(session, sweep.departures, entry, outcome, sweep.store)
            _record_retry(sweep.store, entry, outcome, session.host.name)
            if retry is None:
                self.outcomes.append((entry.order, outcome))
            return retry
        except OrchError as exc:  # before the plan became a run (its render, its env): its outcome, its exit code
            self.outcomes.append((entry.order, Outcome(None, "-", entry.plan.variant, session.host.name, FAILED,
                                                       error=str(exc), evidence=exc.evidence, exit_code=exc.exit_code)))
            return None

    def _told(self, outcome: Outcome) -> None:
        """What the run's row says of the host: what was cleaned up before it (the first run), the
        Slurm job it ran in; a broken lock warned."""
        store, session = self.sweep.store, self.session
        if outcome.run_id is not None:  # the first run on the host tells what was cleaned up before it
            for note in self.notes:
                store.event(store.get(str(outcome.run_id)), "recovered", note)
            self.notes.clear()
        if outcome.run_id is not None and (job := slurm.job_of(session.conn)) is not None:
            store.event(store.get(str(outcome.run_id)), "slurm-job", job.describe())  # where the run ran

    async def _lock_kept(self, outcome: Outcome) -> None:
        """A host whose lock another command broke during the run is that command's now: it leaves the sweep."""
        lock = self.held.lock
        if lock is not None and lock.lost:
            await self.sweep.departures.leave(self.session.host.name, HostError(
                f"{self.session.host.name}: {lock.path} was broken by another command during run {outcome.uid}"))


async def _stoppable(run: Coroutine[Any, Any, Outcome], store: Store, variant: str, host: str) -> Outcome:
    """`run` (a `run_one`) to its end; a run `orch stop RUN` stopped alone ends there, its cancel
    taken back, so the sweep goes on (`runstop.py`); the sweep's own cancel (a signal) goes on up."""
    try:
        return await run
    except asyncio.CancelledError:
        task = asyncio.current_task()
        run_id = runstop.STOPS.taken_back(task) if task is not None else None
        if run_id is None:
            raise
    row = store.get(str(run_id))
    return Outcome(row.id, row.uid, variant, host, row.status, store.record(row)["metrics"], tuple(row.flags or ()),
                   row.error, exit_code=0 if row.status == SUCCEEDED else EXIT_RUN_FAILED)


async def _slot_port(session: HostSession, slots: Slots, lease: Lease) -> Lease:
    """A slot past the first moves up from a port another process listens on (a few tries; the
    last taken one is refused by run_one's port check, with its holder named)."""
    for _ in range(SLOT_PORT_TRIES):
        if lease.index == 0 or lease.port is None or not (await occupancy.listener(session.conn, session.host,
                                                                                   lease.port)).listening:
            break
        lease = slots.moved(lease, lease.port + 1)
    return lease


async def _lost_link(session: HostSession, departures: Departures, entry: Entry, outcome: Outcome,
                     store: Store) -> Entry | None:
    """After a failed run, is the link gone for good (the host does not answer a stat, reconnecting
    included)? Then the host leaves the sweep, and the run goes back to the queue once: the retry."""
    if outcome.status != FAILED:
        return None
    name = session.host.name
    retried = entry.retry_of is None and outcome.run_id is not None  # a retry is not retried again
    try:
        await session.conn.stat(session.host.workdir)
        return None  # the host answers: the error was the run's (a taken port, busy GPUs)
    except (OrchError, OSError) as exc:
        await departures.leave(name, HostError(f"{name}: the link failed for good during run {outcome.uid} ({exc})"),
                               retried)
    if not retried:
        return None
    store.event(store.get(str(outcome.run_id)), "requeued",
                f"the link to {name} failed for good; the plan goes back to the queue for another host (once)")
    return Entry(entry.order, entry.plan, retry_of=outcome.run_id, lost_host=name)


def _record_retry(store: Store, entry: Entry, outcome: Outcome, host: str) -> None:
    """A retry and the run it retries name each other."""
    if entry.retry_of is None or outcome.run_id is None:
        return
    first, retry = store.get(str(entry.retry_of)), store.get(str(outcome.run_id))
    store.event(retry, "retry", f"retry of run {first.id} ({first.uid}), cut short when the link to "
                f"{entry.lost_host} failed")
    store.event(first, "retried", f"retried as run {retry.id} ({retry.uid}) on {host}")


def _current_run(store: Store, host: str) -> str:
    from orchestrator.store import database as store_queries
    running = store_queries.running_runs(store, host, controller())
    return running[-1].uid if running else ""
