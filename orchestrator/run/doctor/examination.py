"""One doctor's visit: the experiment's variant run again with the probes patched in (an ordinary
recorded run, variant `doctor-probe`), the cause decided from what it recorded, then the fix run
(variant `doctor-fix`) and the accept length before and after.

Both runs go through the normal run path (`sweep.run_all`): locked, preflighted, patched and
reverted, recorded in the store, so `orch diff` compares them like any two runs."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.inventory import Host
from orchestrator.core.spec import CheckpointDef, PatchDef, RunPlan, Spec, Variant, expand
from orchestrator.engines import preflight_codes
from orchestrator.errors import SpecError
from orchestrator.run import check, plankey, sweep
from orchestrator.run.attempt import Reporter
from orchestrator.store import reading
from orchestrator.store.database import Store

from orchestrator.engines import probe as probe_seam

from . import causes, fixes
from .evidence import read

PROBE, FIX = "doctor-probe", "doctor-fix"
_NOT_APPLIED = "patch-does-not-apply"


@dataclass(frozen=True)
class Verdict:
    """What the doctor found, did and measured."""

    cause: str
    evidence: tuple[str, ...]
    fix: fixes.Fix | None
    accept_len_before: float | None
    accept_len_after: float | None
    runs: tuple[dict[str, Any], ...]
    probes: tuple[str, ...]
    rule: str
    preflight: bool
    skipped_probes: tuple[str, ...] = field(default_factory=tuple)
    fix_ran: bool = False

    @property
    def confirmed(self) -> bool | None:
        """The fix ran and the draft is now accepted (None: no fix ran; False: it ran and did not
        serve, or the draft is still rejected)."""
        if not self.fix_ran:
            return None
        if self.accept_len_after is None:
            return False
        before = self.accept_len_before if self.accept_len_before is not None else 1.0
        return self.accept_len_after >= causes.FITS and self.accept_len_after > before

    def as_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "evidence": list(self.evidence), "fix": self.fix.as_json() if self.fix else None,
                "accept_len_before": self.accept_len_before, "accept_len_after": self.accept_len_after,
                "runs": list(self.runs), "probes": list(self.probes), "skipped_probes": list(self.skipped_probes),
                "rule": self.rule, "preflight": self.preflight, "confirmed": self.confirmed,
                "meaning": causes.CODES.get(self.cause, "")}


def chosen_variant(spec: Spec, name: str | None) -> Variant:
    """The variant to examine: the one named, or the experiment's only one."""
    names = [v.name for v in spec.variants]
    if name is None:
        if len(spec.variants) == 1:
            return spec.variants[0]
        raise SpecError(f"{spec.path}: the experiment has {len(names)} variants ({', '.join(names)}); "
                        f"name the one to examine with --variant")
    found = next((v for v in spec.variants if v.name == name), None)
    if found is None:
        raise SpecError(f"{spec.path}: no variant named {name}; variants: {', '.join(names)}")
    return found


async def examine(spec: Spec, variant: Variant, host: Host, store: Store, reporter: Reporter,
                  overrides: tuple[str, ...] = ()) -> Verdict:
    """Probe the variant on `host`, decide the cause, run its fix, compare accept lengths."""
    engine = _engine_probes(spec.engine)
    kept, skipped = await _fitting_probes(spec, variant, host, engine.probes, overrides)
    patches = tuple(p for probe in kept for p in probe.patches)
    probe_run = await _run(spec, _variant(variant, PROBE, "the variant with orch doctor's probes", patches),
                           host, store, reporter, overrides)
    evidence = read(probe_run, list(probe_run["preflight"]), tuple(p.name for p in kept), engine.algorithm_param,
                    engine.one_layer_values)
    decision = causes.decide(evidence)
    written = {**spec.params, **variant.params}.get(fixes.DRAFT_PARAM)
    fix = fixes.for_cause(decision, evidence, engine, spec.checkpoints, written,
                          probe_run["params"].get(fixes.DRAFT_PARAM), host.transport == "local")
    runs = [_summary(probe_run)]
    after = None
    if fix is not None and fix.runnable:
        fix = await _completed(spec, variant, fix, engine, host, overrides, patches)
        fix_run = await _run(spec, _variant(variant, FIX, f"orch doctor's fix: {fix.says}", patches, fix),
                             host, store, reporter, overrides, fix)
        runs.append(_summary(fix_run))
        after = fix_run["metrics"].get("accept_len")
    lines = tuple(dict.fromkeys(decision.evidence + (evidence.acceptance_line(),)))
    return Verdict(decision.cause, lines, fix, evidence.accept_len, None if after is None else float(after),
                   tuple(runs), evidence.probes_run, decision.rule, spec.preflight, tuple(p.name for p in skipped),
                   fix_ran=len(runs) > 1)


def _variant(base: Variant, name: str, description: str, probes: tuple[PatchDef, ...],
             fix: fixes.Fix | None = None) -> Variant:
    """`base` as the doctor runs it: its params (and the fix's), its patches, the probes; every
    preflight error allowed (the probe run is the evidence, a blocked run shows nothing); no
    expectation (a low accept length is what is being examined); a server of its own."""
    params = {**base.params, **(fix.params if fix else {})}
    patches = base.patches + tuple(p.name for p in (fix.patches if fix else ()) + probes)
    return dataclasses.replace(base, name=name, description=description, params=params, patches=patches,
                               expect={}, allow=(), fresh_server=True)


def _derived(spec: Spec, variant: Variant, patches: tuple[PatchDef, ...],
             checkpoints: tuple[CheckpointDef, ...] = ()) -> Spec:
    """The experiment with the doctor's variant alone, its patches and checkpoints added, its probe
    lines caught as debug lines, and every preflight error allowed."""
    return dataclasses.replace(
        spec, variants=(variant,), patches={**spec.patches, **{p.name: p for p in patches}},
        checkpoints=spec.checkpoints + tuple(c for c in checkpoints if c.name not in {d.name for d in spec.checkpoints}),
        debug_pattern=f"(?:{spec.debug_pattern})|{probe_seam.PATTERN}", allow=preflight_codes(spec.engine),
        matrix={}, repeats=1)


def _plans(derived: Spec, overrides: tuple[str, ...], host: Host) -> list[RunPlan]:
    plans = expand(derived, overrides, (derived.variants[0].name,))
    return plankey.fingerprinted(derived, [dataclasses.replace(p, hosts=(host.name,)) for p in plans])


async def _checked(spec: Spec, variant: Variant, patches: tuple[PatchDef, ...], host: Host,
                   overrides: tuple[str, ...], checkpoints: tuple[CheckpointDef, ...] = ()) -> list[dict[str, Any]]:
    """`orch check`'s findings for the variant with these patches (the host read, nothing changed)."""
    derived = _derived(spec, variant, patches, checkpoints)
    groups = await check.check_plans(derived, _plans(derived, overrides, host), [host])
    return [f for g in groups for f in g["findings"]]


async def _fitting_probes(spec: Spec, variant: Variant, host: Host, book: tuple[probe_seam.Probe, ...],
                          overrides: tuple[str, ...]) -> tuple[list[probe_seam.Probe], list[probe_seam.Probe]]:
    """The probes whose anchors this host's engine source holds: a probe another release's lines
    anchor is dropped (the check stops at the first patch that does not apply, so this asks again)."""
    kept, skipped = list(book), []
    while kept:
        probe_variant = _variant(variant, PROBE, "", tuple(p for probe in kept for p in probe.patches))
        findings = await _checked(spec, probe_variant, tuple(p for probe in kept for p in probe.patches), host, overrides)
        failed = [f for f in findings if f["code"] == _NOT_APPLIED or (f.get("severity") == "error" and "patch" in f["code"])]
        broken = next((probe for probe in kept for f in failed for p in probe.patches if f"'{p.name}'" in f["what"]), None)
        if broken is None:
            if failed:  # a patch of the experiment itself fails: the probe run would stop there too
                raise SpecError(f"orch doctor: {failed[0]['what']}; fix: {failed[0]['fix']}")
            break
        kept.remove(broken)
        skipped.append(broken)
    return kept, skipped


async def _completed(spec: Spec, variant: Variant, fix: fixes.Fix, engine: probe_seam.Probes, host: Host,
                     overrides: tuple[str, ...], probes: tuple[PatchDef, ...]) -> fixes.Fix:
    """The fix with what its own preflight says it still needs: an EAGLE3 launch on a target class
    without aux capture gets the capture method patched in (as newer releases write it)."""
    fix_variant = _variant(variant, FIX, "", probes, fix)
    findings = await _checked(spec, fix_variant, fix.patches + probes, host, overrides, fix.checkpoints)
    missing = next((f for f in findings if f["code"] == "aux-capture-missing" and f["severity"] == "error"), None)
    patch = engine.capture_patch(missing) if missing else None
    if patch is None:
        return fix
    return dataclasses.replace(fix, says=f"{fix.says}, with patch {patch.name} adding the aux-capture method the "
                               f"target class lacks (forwarded to its inner model, as newer releases write it)",
                               patches=fix.patches + (patch,))


async def _run(spec: Spec, variant: Variant, host: Host, store: Store, reporter: Reporter,
               overrides: tuple[str, ...], fix: fixes.Fix | None = None) -> dict[str, Any]:
    """One ordinary recorded run of `variant`; its record as `orch show --json` gives it."""
    patches = tuple(spec.patches.get(n) or _added(n, variant, fix, spec.engine) for n in variant.patches)
    derived = _derived(spec, variant, patches, fix.checkpoints if fix else ())
    outcomes = await sweep.run_all(derived, _plans(derived, overrides, host), [host], store, reporter)
    outcome = outcomes[0]
    if outcome.run_id is None:
        raise SpecError(f"orch doctor: the {variant.name} run on {host.name} did not start: {outcome.error}")
    return reading.record(store, reading.get(store, str(outcome.run_id)))


def _engine_probes(engine: str) -> probe_seam.Probes:
    """The engine's `probes` module's offer (each engine package keeps one)."""
    module = importlib.import_module(f"orchestrator.engines.{engine}.probes")
    offer: probe_seam.Probes = module.PROBES
    return offer


def _added(name: str, variant: Variant, fix: fixes.Fix | None, engine: str) -> PatchDef:
    """A patch the doctor wrote (a probe or the fix's), by name."""
    for patch in (*(fix.patches if fix else ()), *(p for probe in _engine_probes(engine).probes for p in probe.patches)):
        if patch.name == name:
            return patch
    raise SpecError(f"orch doctor: variant {variant.name} names patch {name}, which nothing defines")


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    return {"id": record["id"], "uid": record["uid"], "variant": record["variant"], "status": record["status"],
            "accept_len": record["metrics"].get("accept_len")}

