"""An experiment's runs: planned and checked (`plan_runs`), made (`Sweep.run_async`), rendered
without a host touched (`render_runs`), and what an interrupted sweep left (`Sweep.interrupted`):
what `orch run` and `orch render` do, and `run_experiment` with them."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.core.inventory import Host
    from orchestrator.core.spec import RunPlan, Spec
    from orchestrator.errors import OrchError
    from orchestrator.records import MetricInfo
    from orchestrator.run.attempt import Reporter
    from orchestrator.run.execute import Outcome
    from orchestrator.run.plankey import Decision
    from orchestrator.store.database import Run, Store

_Where = str | PathLike[str]
_DEFAULT_INVENTORY = "inventory.yaml"
_DEFAULT_DB = "sqlite:///orch.db"


@dataclass
class Sweep:
    """An experiment's runs as `orch run` would make them: the experiment (its `--no-preflight`,
    `--allow-busy-gpus`, `--accept-drift` and `--wait` applied), the plans still to run, the hosts
    they may run on and the database they are recorded in. `decisions`: with `resume`, why each
    plan runs or is skipped. `controller` and `since` find this process's runs again. `departed`:
    the hosts that left the sweep once it ran, and why (each said as it left; `orch run` exits 3)."""

    spec: Spec
    plans: list[RunPlan]
    hosts: list[Host]
    store: Store
    dry_run: bool = False
    decisions: list[Decision] = field(default_factory=list)
    controller: str = ""
    since: str = ""
    departed: dict[str, OrchError] = field(default_factory=dict)

    @property
    def metrics(self) -> tuple[MetricInfo, ...]:
        """The metrics the experiment's engine declares, as the summary shows them."""
        return engine_metrics(self.spec.engine)

    async def run_async(self, report: Reporter) -> list[Outcome]:
        """Every plan on the hosts, recorded (a dry run renders and checks, records nothing)."""
        from orchestrator.run import sweep

        return await sweep.run_all(self.spec, self.plans, self.hosts, self.store, report, dry_run=self.dry_run,
                                   left=self.departed)

    @property
    def cleanup_bound_s(self) -> float:
        """How long an interrupted sweep's cleanup may take: every server's grace, then the reverts."""
        from orchestrator.run.stopping import CLEANUP_BOUND_S

        return float(CLEANUP_BOUND_S)

    @property
    def stop_signal(self) -> int:
        """The signal `orch stop RUN` sends this process to stop one of its runs alone."""
        from orchestrator.run import runstop

        return int(runstop.SIGNAL)

    def stop_asked(self) -> None:
        """`orch stop RUN` asked this process for one of its runs to stop (`run/runstop.py`)."""
        from orchestrator.run import runstop

        runstop.asked(self.store, self.controller)

    def still_left(self) -> list[str]:
        """What an interrupted sweep's cleanup has not finished, host by host, and the command that
        finishes it."""
        from orchestrator.store.database import controller_runs
        from orchestrator.store.reading import RUNNING

        running = [r for r in controller_runs(self.store, self.controller, self.since) if r.status == RUNNING]
        if not running:
            return ["nothing left running; orch exits once every host's connection is closed"]
        pid = self.controller.rsplit(":", 1)[-1]
        return [f"{r.host}: run {r.uid} is still stopping its server / reverting its patches; if orch must stop "
                f"now (kill -9 {pid}), `orch revert --host {r.host}` finishes the cleanup" for r in running]

    def interrupted(self, report: Callable[[str, str], None]) -> tuple[list[Outcome], list[RunPlan]]:
        """After an interruption: what it did on each host, as `report(host, line)`; the outcomes of
        every run this sweep made and the plans it never started."""
        from orchestrator.run.execute import Outcome
        from orchestrator.store.database import controller_runs

        made = controller_runs(self.store, self.controller, self.since)
        for host in self.hosts:
            report(host.name, self._host_line([r for r in made if r.host == host.name]))
        outcomes = [Outcome(r.id, r.uid, r.variant, r.host, r.status, self.store.record(r)["metrics"],
                            tuple(r.flags or ()), r.error, exit_code=_exit_code(r.status)) for r in made]
        started = Counter(r.plan_key for r in made)
        unstarted = []
        for plan in self.plans:
            if started[plan.key] > 0:
                started[plan.key] -= 1
                continue
            unstarted.append(plan)
        return outcomes, unstarted

    def _host_line(self, runs: list[Run]) -> str:
        from orchestrator.store.database import PatchRow
        from orchestrator.store.reading import INTERRUPTED

        cut = [r for r in runs if r.status == INTERRUPTED]
        if not cut:
            return f"no run was in progress; {len(runs)} run(s) had ended"
        parts = []
        for r in cut:
            events = {e["kind"]: e["message"] for e in self.store.record(r)["events"]}
            stopped = f"server stopped ({events['stopped']})" if "stopped" in events else "no server was running"
            patches = self.store.children(r, PatchRow)
            reverted = sum(p.state == "reverted" for p in patches)
            left = len(patches) - reverted
            parts.append(f"run {r.uid} interrupted: {stopped}; {reverted} patch(es) reverted"
                         + (f", {left} not reverted: see `orch patches`" if left else ""))
        return "; ".join(parts)


def _exit_code(status: str) -> int:
    from orchestrator.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED
    from orchestrator.store.reading import INTERRUPTED, SUCCEEDED

    return {SUCCEEDED: EXIT_OK, INTERRUPTED: EXIT_INTERRUPTED}.get(status, EXIT_RUN_FAILED)


def plan_runs(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
              hosts: Sequence[str] = (), overrides: Sequence[str] = (), variants: Sequence[str] = (),
              dry_run: bool = False, resume: bool = False, no_preflight: bool = False,
              allow_busy_gpus: bool = False, accept_drift: bool = False, wait: float | None = None) -> Sweep:
    """`orch run SPEC` up to its first run: the experiment read and checked, its plans made (each
    option as `run_experiment` takes it) and, with `resume`, those with a succeeded run of the same
    fingerprint left out. A dry run's database is opened only if something asks it: it records
    nothing, so it loads no ORM and makes no database file."""
    from orchestrator.core.clock import now
    from orchestrator.run import execute, plankey

    loaded, plans, chosen = load_plans(spec, inventory, hosts, overrides, variants)
    if no_preflight:
        loaded = dataclasses.replace(loaded, preflight=False)
    if allow_busy_gpus:
        loaded = dataclasses.replace(loaded, allow_busy_gpus=True)
    if accept_drift:
        loaded = dataclasses.replace(loaded, accept_drift=True)
    if wait is not None:
        loaded = dataclasses.replace(loaded, lock_wait_s=wait)
    plans = plankey.fingerprinted(loaded, plans)
    store: Any = _OpenedWhenUsed(db) if dry_run else _store(db)
    decisions: list[Decision] = []
    if resume:
        decisions = plankey.decide(plans, store.succeeded_keys(loaded.name), lambda run_id: _recorded_parts(store, run_id))
        plans = [d.plan for d in decisions if d.runs]
    return Sweep(loaded, plans, chosen, store, dry_run, decisions, execute.controller(), now())


def _recorded_parts(store: Store, run_id: int) -> dict[str, Any] | None:
    """The fingerprint parts run `run_id` recorded (its `fingerprint` event); None: it has none."""
    import json

    from orchestrator.store.database import EventRow

    found = next((e.message for e in store.children(store.get(str(run_id)), EventRow) if e.kind == "fingerprint"), None)
    try:
        parts = json.loads(found) if found else None
    except ValueError:  # cut short, or written by hand
        return None
    return parts if isinstance(parts, dict) else None


def load_plans(spec: _Where, inventory: _Where, hosts: Sequence[str], overrides: Sequence[str],
               variants: Sequence[str]) -> tuple[Spec, list[RunPlan], list[Host]]:
    """The experiment, its plans (checked as `orch run` checks them) and the hosts they may run on."""
    from orchestrator.core import inventory as inventories, plancheck, spec as specs

    loaded = specs.load(Path(spec))
    hosts_file = inventories.load(Path(inventory))
    plancheck.check_template_place(loaded, hosts_file.template_folders)
    plans = specs.expand(loaded, overrides, tuple(variants))
    plancheck.check(loaded, plans, list(overrides))
    chosen = hosts_file.select(tuple(hosts) or loaded.hosts)
    return loaded, plans, chosen


def _store(db: str) -> Store:
    from orchestrator.store.database import Store

    return Store(db)


class _OpenedWhenUsed:
    """The database of a dry run, opened only if something asks it (an interrupted dry run's report)."""

    def __init__(self, db: str) -> None:
        self._db = db
        self._store: Store | None = None

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            self._store = _store(self._db)
        return getattr(self._store, name)


@dataclass(frozen=True)
class Rendered:
    """The launch script one run would use (its secrets hidden), and for which variant and host."""

    variant: str
    host: str
    script: str


def render_runs(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, hosts: Sequence[str] = (),
                overrides: Sequence[str] = (), variants: Sequence[str] = ()) -> Iterator[Rendered]:
    """`orch render SPEC`: the launch script each run would use on the first of the hosts, secrets
    hidden, without touching any host (options as `run_experiment` takes them); each as it is
    rendered (the experiment is read at the first)."""
    from orchestrator.core import render as renderer
    from orchestrator.core.secrets import redact
    from orchestrator.host.session import absolute
    from orchestrator.remote import is_this_machine
    from orchestrator.run import execute

    loaded, plans, chosen = load_plans(spec, inventory, hosts, overrides, variants)
    for plan in plans:
        host = chosen[0]
        if is_this_machine(host):  # a remote home is only known once connected
            host = dataclasses.replace(host, workdir=absolute(host.workdir, str(Path.home())))
        context = execute.run_context(loaded, plan, host, "<run>")
        script = redact(renderer.launch_script(loaded.template, context), context["env"], context["secret_names"])
        yield Rendered(plan.variant, host.name, script)


def engine_metrics(engine: str) -> tuple[MetricInfo, ...]:
    """The metrics an engine declares (accept length first), as orch's tables show them."""
    from orchestrator import engines

    return tuple(engines.get(engine).metrics)
