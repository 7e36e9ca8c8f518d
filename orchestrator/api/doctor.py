"""`orch doctor SPEC|RUN`: from a low accept length to a named, confirmed cause (run/doctor/)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import SpecError

if TYPE_CHECKING:
    from orchestrator.run.attempt import Reporter
    from orchestrator.run.doctor.examination import Verdict

_DEFAULT_INVENTORY = "inventory.yaml"
_DEFAULT_DB = "sqlite:///orch.db"


def doctor(target: str, *, variant: str | None = None, hosts: tuple[str, ...] = (), no_preflight: bool = False,
           wait: float | None = None, inventory: str | PathLike[str] = _DEFAULT_INVENTORY, db: str = _DEFAULT_DB,
           report: Callable[[str, str], None] | Reporter | None = None) -> Verdict:
    """`orch doctor SPEC|RUN --json`: probe a variant with a low accept length, name its cause, run
    its fix and compare. `target`: an experiment file, or a recorded run (its experiment, variant
    and host); `variant`: the one to examine (needed when there are several); `hosts`: the host
    to examine it on (default: the experiment's first); `no_preflight`: probes alone, no checkpoint
    checks; `wait`: seconds the probe and fix runs wait for a host another orch command holds;
    `report`: `(host, message)` progress, or a Reporter with the run stages' hooks (default: none).
    The verdict's `confirmed` is False when the fix did not lift the accept length."""
    import asyncio  # here: `orch --help` must not load the event loop

    from orchestrator.core import inventory as inventories, plancheck, spec as specs
    from orchestrator.run.attempt import Lines
    from orchestrator.run.doctor import examination
    from orchestrator.store.database import Store

    spec_path, variant, host_names = _what(target, variant, tuple(hosts), db)
    spec = specs.load(spec_path)
    hosts_file = inventories.load(Path(inventory))
    plancheck.check_template_place(spec, hosts_file.template_folders)
    chosen = examination.chosen_variant(spec, variant)
    plancheck.check(spec, specs.expand(spec, (), (chosen.name,)), [])
    if no_preflight:
        spec = dataclasses.replace(spec, preflight=False)
    if wait is not None:  # as `orch run --wait`: the probe and fix runs wait instead of failing busy
        spec = dataclasses.replace(spec, lock_wait_s=wait)
    host = hosts_file.select(host_names or spec.hosts)[0]
    reporter: Any = report if hasattr(report, "message") else Lines(report or _quiet)  # a Reporter, or lines
    return asyncio.run(examination.examine(spec, chosen, host, Store(db), reporter))


def _what(target: str, variant: str | None, hosts: tuple[str, ...], db: str) -> tuple[Path, str | None, tuple[str, ...]]:
    """An experiment file as given, or the experiment, variant and host of a recorded run."""
    if Path(target).suffix in (".yaml", ".yml") or Path(target).is_file():
        if not Path(target).is_file():
            raise SpecError(f"orch doctor: experiment file {target} not found; give an experiment file or a run id")
        return Path(target), variant, hosts
    from orchestrator.store import reading

    reader = reading.open_url(db)
    run = reading.record(reader, reading.get(reader, target))
    spec_path = str(run["spec_path"] or "")
    if not spec_path or not Path(spec_path).is_file():
        raise SpecError(f"orch doctor: run {run['id']}'s experiment file {spec_path!r} is not here; "
                        f"run orch doctor SPEC --variant {run['variant']} from the folder it ran in")
    return Path(spec_path), variant or str(run["variant"]), hosts or (str(run["host"]),)


def cause_meaning(cause: str) -> str:
    """What a cause code of the doctor's verdict means (empty for a code it does not know)."""
    from orchestrator.run.doctor import causes

    return causes.CODES.get(cause, "")


def _quiet(host: str, message: str) -> None:
    """The default report: a library call prints nothing (with --json, stdout is the JSON alone)."""
