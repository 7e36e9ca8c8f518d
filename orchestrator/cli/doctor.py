"""`orch doctor SPEC|RUN`: from a low accept length to a named, confirmed cause (orchestrator/doctor)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from orchestrator.errors import EXIT_OK, SpecError
from . import ui, waiting
from .app import _split, _store, app, dumps, settings

_EXIT_NOT_CONFIRMED = 1


@app.command()
def doctor(
    target: str = typer.Argument(..., metavar="SPEC|RUN", help="Experiment file, or a recorded run (id, uid prefix, last)."),
    variant: str | None = typer.Option(None, "--variant", help="The variant to examine (needed when there are several)."),
    hosts: str | None = typer.Option(None, "--hosts", help="The host to examine it on (default: the experiment's first)."),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Probes alone: skip the checkpoint checks."),
    as_json: bool = typer.Option(False, "--json", help="{cause, evidence, fix, accept_len_before, accept_len_after, runs}."),
    wait: str | None = typer.Option(None, "--wait", metavar="[TIMEOUT]", help="Wait up to TIMEOUT seconds "
                                       "(alone: an hour) for a host or package tree another orch command holds."),
) -> None:
    """Probe a variant with low accept length, name its cause, run the fix and compare."""
    from orchestrator.core import inventory as inventories, plancheck, spec as specs
    from orchestrator.run.doctor import examination

    spec_path, variant, host_names = _what(target, variant, hosts)
    spec = specs.load(spec_path)
    inv = inventories.load(settings.inventory)
    plancheck.check_template_place(spec, inv.template_folders)
    chosen = examination.chosen_variant(spec, variant)
    plancheck.check(spec, specs.expand(spec, (), (chosen.name,)), [])
    if no_preflight:
        spec = dataclasses.replace(spec, preflight=False)
    if wait is not None:  # as `orch run --wait`: the probe and fix runs wait instead of failing busy
        spec = dataclasses.replace(spec, lock_wait_s=waiting.seconds(wait))
    host = inv.select(host_names or spec.hosts)[0]
    from orchestrator.run.attempt import Lines

    reporter = ui.reporter if not as_json else Lines(_quiet)
    import asyncio  # here: `orch --help` must not load the event loop

    verdict = asyncio.run(examination.examine(spec, chosen, host, _store(), reporter))
    if as_json:
        ui.console.print(dumps(verdict.as_json()), markup=False, highlight=False, soft_wrap=True)
    else:
        ui.progress_done()
        for line in told(verdict):
            ui.console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(_EXIT_NOT_CONFIRMED if verdict.confirmed is False else EXIT_OK)


def _what(target: str, variant: str | None, hosts: str | None) -> tuple[Path, str | None, tuple[str, ...]]:
    """An experiment file as given, or the experiment, variant and host of a recorded run."""
    if Path(target).suffix in (".yaml", ".yml") or Path(target).is_file():
        if not Path(target).is_file():
            raise SpecError(f"orch doctor: experiment file {target} not found; give an experiment file or a run id")
        return Path(target), variant, _split(hosts)
    from orchestrator.store import reading

    reader = reading.open_url(settings.db)
    run = reading.record(reader, reading.get(reader, target))
    spec_path = str(run["spec_path"] or "")
    if not spec_path or not Path(spec_path).is_file():
        raise SpecError(f"orch doctor: run {run['id']}'s experiment file {spec_path!r} is not here; "
                        f"run orch doctor SPEC --variant {run['variant']} from the folder it ran in")
    return Path(spec_path), variant or str(run["variant"]), _split(hosts) or (str(run["host"]),)


def told(verdict: Any) -> list[str]:
    """The verdict as lines: the cause and what it means, the evidence, the fix, before and after."""
    from orchestrator.run.doctor import causes

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [f"cause: {verdict.cause} ({causes.CODES.get(verdict.cause, '')}); decided by {verdict.rule}"]
    lines += [f"  evidence: {line}" for line in verdict.evidence]
    if verdict.fix is not None:
        lines.append(f"fix: {verdict.fix.says}{'' if verdict.fix.runnable else ' (not run: no change of orch makes it)'}")
    confirmed = {True: "confirmed", False: "NOT confirmed", None: "no fix run"}[verdict.confirmed]
    lines.append(f"accept length before {number(verdict.accept_len_before)}, after {number(verdict.accept_len_after)}: "
                 f"{confirmed}")
    lines.append(f"probes run: {', '.join(dict.fromkeys(verdict.probes)) or 'none'}"
                 f"{'' if verdict.preflight else ' (no preflight)'}; runs: "
                 + ", ".join(f"{r['id']} ({r['variant']}, {r['status']})" for r in verdict.runs))
    return lines


def _quiet(label: str, text: str) -> None:
    return None  # with --json, stdout is the JSON alone: the runs report nothing
