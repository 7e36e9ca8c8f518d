"""orch: run LLM-serving experiments on GPU hosts over SSH and keep an exact record of each run.

The library face: what `orch run`, `check`, `show`, `diff`, `import`, `revert`, `stop` and
`hosts check` do, callable from Python, and every error orch raises; each command's options are
the parameters of its function here. Everything else in the package is internal.

    import orchestrator as orch

    outcomes = orch.run_experiment("experiments/eagle_debug.yaml", inventory="inventory.yaml")
    for outcome in outcomes:
        print(outcome.variant, outcome.status, outcome.metrics.get("accept_len"))
    run = orch.Store("sqlite:///orch.db").get(outcomes[0].uid)

Each function that reaches hosts has an `_async` twin for callers that already run an event
loop. Bad input (the experiment, the inventory, a patch) raises a `SpecError` or `PatchError`, a
host that cannot be reached a `HostError`, all under `OrchError`; a run that fails is an
`Outcome` with status `failed`, not an exception.

Importing the package is cheap: the database layer, the run lifecycle and SSH load on first use.
"""

import typing as _typing
from collections.abc import Callable as _Callable, Sequence as _Sequence
from os import PathLike as _PathLike
from pathlib import Path as _Path

from orchestrator.errors import (
    HostBusy, HostError, HTTPError, LinkLost, OrchError, PatchCompileError, PatchError, PreflightError,
    RemoteCommandError, ServerError, SpecError, StoreError, Unreachable, WorkloadError,
)

if _typing.TYPE_CHECKING:
    from orchestrator.core.diff import RunDiff
    from orchestrator.core.spec import RunPlan, Spec
    from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS
    from orchestrator.run.attempt import Stage
    from orchestrator.host.facts import HostFacts
    from orchestrator.host.reverting import Reverted as _Reverted
    from orchestrator.run.execute import Outcome
    from orchestrator.run.logimport import Imported, LogSource as _LogSource
    from orchestrator.store.database import Store
    from orchestrator.api.report import write_report
    from orchestrator.api.runs import Sweep, engine_metrics, plan_runs, render_runs
    from orchestrator.api.hosts import HostEntry, clean_hosts, list_hosts, list_patches
    from orchestrator.api.doctor import cause_meaning, doctor
    from orchestrator.core.defaults import DEFAULT_DEBUG_PATTERN
    from orchestrator.api.compare import compare_configurations, compare_csv, diff_configurations
    from orchestrator.api.records import (
        list_runs, list_runs_csv, list_runs_json, recorded_names, resolve_run, run_log, run_series,
    )
    from orchestrator.api.tags import note_run, tag_run

__version__ = "0.1.0"

__all__ = [
    "run_experiment", "run_experiment_async", "check_experiment", "check_experiment_async", "load_spec",
    "show_run", "run_requests", "diff_runs", "revert_patches", "revert_patches_async", "stop_runs", "stop_runs_async",
    "check_hosts", "check_hosts_async", "import_log",
    "list_runs", "list_runs_json", "list_runs_csv", "resolve_run", "run_series", "run_log", "recorded_names",
    "tag_run", "note_run",
    "compare_configurations", "compare_csv", "diff_configurations", "write_report", "DEFAULT_DEBUG_PATTERN",
    "plan_runs", "render_runs", "engine_metrics", "Sweep", "list_hosts", "list_patches", "clean_hosts", "HostEntry",
    "doctor", "cause_meaning", "RunPlan", "Stage", "HOST_SPECIFIC_PARAMS",
    "Spec", "Outcome", "Store", "RunDiff", "HostFacts",
    "OrchError", "SpecError", "PatchError", "PatchCompileError", "PreflightError", "HostError", "HostBusy",
    "Unreachable", "LinkLost", "RemoteCommandError", "ServerError", "WorkloadError", "HTTPError", "StoreError",
]

# The types the face hands back, loaded on first use (each pulls in a layer: the spec parser, the
# run lifecycle, the database): name -> (module, attribute).
_LAZY = {
    "Spec": ("orchestrator.core.spec", "Spec"),
    "Outcome": ("orchestrator.run.execute", "Outcome"),
    "Store": ("orchestrator.store.database", "Store"),
    "RunDiff": ("orchestrator.core.diff", "RunDiff"),
    "HostFacts": ("orchestrator.host.facts", "HostFacts"),
}
# The functions of the face that live in its modules (orchestrator/api/, one noun each), loaded
# on first use as the types are.
_LAZY.update({name: ("orchestrator.api.records", name) for name in (
    "list_runs", "list_runs_json", "list_runs_csv", "resolve_run", "run_series", "run_log", "recorded_names")})
_LAZY.update({name: ("orchestrator.api.compare", name) for name in (
    "compare_configurations", "compare_csv", "diff_configurations")})
_LAZY["write_report"] = ("orchestrator.api.report", "write_report")
_LAZY.update({name: ("orchestrator.api.tags", name) for name in ("tag_run", "note_run")})
_LAZY.update({name: ("orchestrator.api.runs", name) for name in ("plan_runs", "render_runs", "engine_metrics", "Sweep")})
_LAZY.update({name: ("orchestrator.api.hosts", name) for name in ("list_hosts", "list_patches", "clean_hosts",
                                                                   "HostEntry")})
_LAZY.update({name: ("orchestrator.api.doctor", name) for name in ("doctor", "cause_meaning")})
_LAZY.update({"RunPlan": ("orchestrator.core.spec", "RunPlan"), "Stage": ("orchestrator.run.attempt", "Stage"),
              "HOST_SPECIFIC_PARAMS": ("orchestrator.core.defaults", "HOST_SPECIFIC_PARAMS")})  # host-bound params
_LAZY["DEFAULT_DEBUG_PATTERN"] = ("orchestrator.core.defaults", "DEFAULT_DEBUG_PATTERN")  # `import_log`'s default

_Where = str | _PathLike[str]
_Report = _Callable[[str, str], None]  # (host, message): what a run is doing, as `orch run` prints it
_DEFAULT_INVENTORY = "inventory.yaml"
_DEFAULT_DB = "sqlite:///orch.db"


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def load_spec(path: _Where) -> "Spec":
    """The experiment file at `path`, read and checked (a `SpecError` says file:line of what is wrong)."""
    from orchestrator.core import spec as specs

    return specs.load(_Path(path))


def run_experiment(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                   hosts: _Sequence[str] = (), overrides: _Sequence[str] = (), variants: _Sequence[str] = (),
                   dry_run: bool = False, resume: bool = False, no_preflight: bool = False,
                   allow_busy_gpus: bool = False, accept_drift: bool = False, wait: float | None = None,
                   report: _Report | None = None) -> "list[Outcome]":
    """`orch run SPEC`: every variant x matrix point x repeat on the chosen hosts, recorded in the
    database at `db`; one `Outcome` per planned run. `hosts`: names or tags (default: the
    experiment's); `overrides`: `key=value` or `env.NAME=value` as `--set` takes them; `variants`:
    only these; `dry_run`: render and check, change nothing; `resume`: skip the plans that already
    have a succeeded run with the same fingerprint; `no_preflight`: skip the checkpoint checks;
    `allow_busy_gpus`: run where another process holds the run's GPUs; `accept_drift`: patch a file
    changed by hand since orch left it, as it is now (each of the three recorded with the run);
    `wait`: seconds to wait for a host another orch command holds, instead of refusing it;
    `report(host, message)`: progress (default: none)."""
    import asyncio

    return asyncio.run(run_experiment_async(spec, inventory=inventory, db=db, hosts=hosts, overrides=overrides,
                                            variants=variants, dry_run=dry_run, resume=resume,
                                            no_preflight=no_preflight, allow_busy_gpus=allow_busy_gpus,
                                            accept_drift=accept_drift, wait=wait, report=report))


async def run_experiment_async(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                               hosts: _Sequence[str] = (), overrides: _Sequence[str] = (),
                               variants: _Sequence[str] = (), dry_run: bool = False, resume: bool = False,
                               no_preflight: bool = False, allow_busy_gpus: bool = False, accept_drift: bool = False,
                               wait: float | None = None, report: _Report | None = None) -> "list[Outcome]":
    """`run_experiment` on the caller's event loop."""
    from orchestrator.api.runs import plan_runs
    from orchestrator.run.attempt import Lines

    sweep = plan_runs(spec, inventory=inventory, db=db, hosts=hosts, overrides=overrides, variants=variants,
                      dry_run=dry_run, resume=resume, no_preflight=no_preflight, allow_busy_gpus=allow_busy_gpus,
                      accept_drift=accept_drift, wait=wait)
    return await sweep.run_async(Lines(report or _quiet))


def check_experiment(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, hosts: _Sequence[str] = (),
                     overrides: _Sequence[str] = (), variants: _Sequence[str] = ()) -> list[dict[str, _typing.Any]]:
    """`orch check SPEC --json`: for each run the experiment would make, on the host it would run
    on, the findings (flags, patches, checkpoints) — nothing pushed, patched or launched. One group
    per run: `{variant, point, repeat, host, params, findings: [{severity, code, what, why, fix}]}`
    (`point`: its matrix values); `orchestrator.api.findings.grouped` keeps each finding once with
    the points it came from, as `orch check` prints them."""
    import asyncio

    return asyncio.run(check_experiment_async(spec, inventory=inventory, hosts=hosts, overrides=overrides,
                                              variants=variants))


async def check_experiment_async(spec: _Where, *, inventory: _Where = _DEFAULT_INVENTORY, hosts: _Sequence[str] = (),
                                 overrides: _Sequence[str] = (),
                                 variants: _Sequence[str] = ()) -> list[dict[str, _typing.Any]]:
    """`check_experiment` on the caller's event loop."""
    from orchestrator.api.runs import load_plans
    from orchestrator.run import check

    loaded, plans, chosen = load_plans(spec, inventory, hosts, overrides, variants)
    return await check.check_plans(loaded, plans, chosen)


def show_run(run: str, *, db: str = _DEFAULT_DB) -> dict[str, _typing.Any]:
    """`orch show RUN --json`: everything recorded about one run (`run`: its id, a unique prefix of
    its uid, `last` or `last~N`) as plain data: id, experiment, variant, host, status, params, env,
    command, patches, metrics, debug_lines, error, started_at, ended_at and more."""
    from orchestrator.store import reading

    reader = reading.open_url(db)
    return reading.record(reader, reading.get(reader, run))


def run_requests(run: str, *, db: str = _DEFAULT_DB, by_end: bool = False) -> list[dict[str, _typing.Any]]:
    """`orch show RUN --requests --json`: the run's workload requests, one dict each, in the order
    sent (`by_end`: in the order they ended, as `orch series --kind requests` lists them)."""
    from orchestrator.store import reading

    reader = reading.open_url(db)
    found: _typing.Any = reading.get(reader, run)  # a row whose fields the reader names at run time
    rows = reading.requests(reader, found.id)
    return sorted(rows, key=lambda r: r["at_s"]) if by_end else rows


def diff_runs(run_a: str = "last~1", run_b: str = "last", *, db: str = _DEFAULT_DB,
              everything: bool = False) -> "RunDiff":
    """`orch diff RUN_A RUN_B`: two runs side by side (params, env, metrics with deltas, patches,
    debug fields, launch command). `.shown()` leaves out what differs only by where or when the
    runs ran (a port, a path on the host) and the metrics they measured alike, `.hidden_text()`
    says how many lines that is; `everything`: all of it, and the equal params and debug fields
    too. `.as_json()` is what `orch diff --json` prints."""
    from orchestrator.core import diff as diffs
    from orchestrator.store import reading

    reader = reading.open_url(db)
    found: list[_typing.Any] = [reading.get(reader, ref) for ref in (run_a, run_b)]  # rows named at run time
    a, b = (reading.record(reader, run) for run in found)
    return diffs.run_diff(a, b, (found[0].spec, found[1].spec), everything=everything)


def revert_patches(hosts: _Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                   force: bool = False, report: _Report | None = None) -> "dict[str, list[_Reverted] | OrchError]":
    """`orch revert`: every patch orch left applied on the hosts (names or tags; default: every host
    of the inventory) put back, each host locked for it. Per host, `(patch record, is a baseline)`
    for each file reverted, restored or found drifted (a file changed since orch patched it, or
    since a revert left it; `force`: restore those too), or the host's error."""
    import asyncio

    return asyncio.run(revert_patches_async(hosts, inventory=inventory, db=db, force=force, report=report))


async def revert_patches_async(hosts: _Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY,
                               db: str = _DEFAULT_DB, force: bool = False,
                               report: _Report | None = None) -> "dict[str, list[_Reverted] | OrchError]":
    """`revert_patches` on the caller's event loop."""
    from orchestrator.core import inventory as inventories
    from orchestrator.host import reverting
    from orchestrator.store.database import Store

    hosts_file = inventories.load(_Path(inventory))
    chosen = hosts_file.select(tuple(hosts) or list(hosts_file.hosts))
    return await reverting.revert_hosts(chosen, Store(db), report or _quiet, force=force)


def stop_runs(run: str | None = None, *, hosts: _Sequence[str] | None = None, every: bool = False,
              sweep: str | None = None, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
              report: _Report | None = None) -> "dict[str, list[str] | OrchError]":
    """`orch stop RUN | --host H | --all`: stop the servers orch started (found by their run mark),
    revert their patches and mark their runs interrupted. Give one of `run` (id, uid or `last`),
    `hosts` (names or tags; empty: every host), `every`, or `sweep` (a run: every run of its
    `orch run`, on the hosts it runs on now). A run whose controller is a live `orch run` here is
    stopped by it and waited for. Per host, a line for each run it interrupted, or the host's error."""
    import asyncio

    return asyncio.run(stop_runs_async(run, hosts=hosts, every=every, sweep=sweep, inventory=inventory, db=db,
                                       report=report))


async def stop_runs_async(run: str | None = None, *, hosts: _Sequence[str] | None = None, every: bool = False,
                          sweep: str | None = None, inventory: _Where = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
                          report: _Report | None = None) -> "dict[str, list[str] | OrchError]":
    """`stop_runs` on the caller's event loop."""
    from orchestrator.core import inventory as inventories
    from orchestrator.run import stopping
    from orchestrator.store.database import Store

    if sweep is not None:  # every run of its `orch run`: the hosts it runs on now, as `hosts` would
        if run is not None or hosts is not None or every:
            raise SpecError("say one thing to stop: `orch stop RUN`, `--sweep RUN`, `--host H` or `--all`")
        hosts = stopping.sweep_hosts(Store(db), sweep)
    if sum((run is not None, hosts is not None, every)) != 1:
        raise SpecError("say what to stop: `orch stop RUN`, `orch stop --host H` or `orch stop --all`")
    store = Store(db)
    target = store.get(run) if run is not None else None  # an unknown run: exit 2
    named = (target.host,) if target is not None else tuple(hosts or ())
    hosts_file = inventories.load(_Path(inventory))
    chosen = hosts_file.select(named or list(hosts_file.hosts))
    return await stopping.stop_runs(store, chosen, target, report or _quiet)


def check_hosts(hosts: _Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY, port: int = 30000,
                timeout: float = 10.0) -> "list[HostFacts]":
    """`orch hosts check --json`: per host (names or tags; default: every host of the inventory), in
    one round trip: reachable or why not, round-trip time, OS, Python, each engine's package, GPUs,
    free disk, and whether `port` is already listening; `timeout`: seconds for each SSH handshake.
    An unreachable host is a record, not an error."""
    import asyncio

    return asyncio.run(check_hosts_async(hosts, inventory=inventory, port=port, timeout=timeout))


async def check_hosts_async(hosts: _Sequence[str] = (), *, inventory: _Where = _DEFAULT_INVENTORY, port: int = 30000,
                            timeout: float = 10.0) -> "list[HostFacts]":
    """`check_hosts` on the caller's event loop."""
    from orchestrator import engines
    from orchestrator.core import inventory as inventories
    from orchestrator.host import facts as hostfacts

    hosts_file = inventories.load(_Path(inventory))
    chosen = hosts_file.select(tuple(hosts) or list(hosts_file.hosts))
    every = [engines.get(name) for name in engines.KNOWN]
    packages = tuple((engine.package, engine.version_files()) for engine in every)
    return await hostfacts.check_all(chosen, port, connect_timeout=timeout, packages=packages)


def import_log(log: str, *, db: str = _DEFAULT_DB, inventory: _Where = _DEFAULT_INVENTORY, name: str | None = None,
               params: _Sequence[str] = (), host: str | None = None, debug_pattern: str | None = None,
               secrets: _Sequence[str] = (), experiment: str | None = None) -> "Imported":
    """`orch import LOGFILE`: record a run made by hand from its server log (a local path, or
    HOST:PATH on an inventory host): metrics, debug lines, diagnosis, the launch command, and when
    it ran (the log's first and last timestamps, where its lines carry them). `experiment`: the
    experiment to file it under, beside that experiment's runs (default: `imported`); `name`: the
    variant (default: `imported` in an experiment given, else the file name); `params`: `key=value`
    to record; `host`: the host to record (default: the HOST of HOST:PATH, else `imported`);
    `debug_pattern`: regex of debug lines (default: the experiment files' default); `secrets`: env
    names whose values to hide in the log, besides the inventory's `secrets:` and names that say so."""
    from orchestrator.api import imports
    from orchestrator.core import inventory as inventories
    from orchestrator.core.defaults import DEFAULT_DEBUG_PATTERN
    from orchestrator.run import logimport

    pattern = DEFAULT_DEBUG_PATTERN if debug_pattern is None else debug_pattern
    hosts_file = _Path(inventory)
    imports.check_names(experiment, name)  # before a log on a host is fetched
    source, name = imports.filed(_log_source(log, pattern, hosts_file), experiment, name)
    sink = logimport.writer(db)
    parsed = logimport.parse_params(list(params))
    declared = tuple(n for h in inventories.load(hosts_file).hosts.values() for n in h.secrets) \
        if hosts_file.exists() else ()  # the log may come from any host of the inventory
    return logimport.record(sink, source, name, parsed, host, pattern, (*declared, *secrets))


def _log_source(log: str, debug_pattern: str, inventory: _Path) -> "_LogSource":
    """A local file when one is there; else HOST:PATH with a host of the inventory."""
    from orchestrator.core import inventory as inventories
    from orchestrator.run import logimport

    if _Path(log).exists() or ":" not in log or not inventory.exists():
        return logimport.read_local(_Path(log))
    hosts = inventories.load(inventory).hosts
    remote = logimport.split_remote(log, hosts)
    if remote is None:
        raise SpecError(f"{log}: no such file here, and {log.partition(':')[0]!r} is not a host of "
                        f"{inventory}; give a local path or HOST:PATH")
    import asyncio

    return asyncio.run(logimport.read_remote(hosts[remote[0]], remote[1], debug_pattern))


def _quiet(host: str, message: str) -> None:
    """The default report: a library call prints nothing."""
