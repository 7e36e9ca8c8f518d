"""`orch check`: every finding for every run an experiment would make, on the host it would run on
(flags, patches, checkpoints), every host at once through the host lifecycle (no lock: nothing is
pushed, patched or launched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.host import lifecycle, patchcheck
from orchestrator.host.lifecycle import Held
from . import execute, launch as launches, stages, sweep, tool
from orchestrator import engines
from orchestrator.core import render
from orchestrator.errors import OrchError, PatchError
from orchestrator.core.inventory import Host
from orchestrator.host.session import HostSession
from orchestrator.core.spec import RunPlan, Spec


async def check_plans(spec: Spec, plans: list[RunPlan], hosts: list[Host]) -> list[dict[str, Any]]:
    """One group per run it would make (its variant, matrix point, repeat, host): flags the host's
    engine would reject, patches that would not apply or would leave a file that does not compile,
    then the checkpoint findings (an error the experiment allows comes marked `allowed`).
    Checkpoints are read from their local (transformed) copies. A host that cannot be checked
    raises its error (the first, in host order)."""
    queues = sweep.schedule(plans, hosts)
    engine = engines.get(spec.engine)

    async def one(held: Held) -> list[dict[str, Any]]:
        session = held.session
        return [await _check_one(spec, plan, session) for plan in queues[session.host.name]]

    results = await lifecycle.on_hosts([h for h in hosts if h.name in queues], one, _quiet, None, engine)
    groups: list[dict[str, Any]] = []
    for result in results.values():
        if isinstance(result, OrchError):
            raise result
        groups.extend(result)
    return groups


def _quiet(label: str, text: str) -> None:
    return None  # `orch check` prints its findings and nothing else (with --json, stdout is the JSON)


async def _check_one(spec: Spec, plan: RunPlan, session: HostSession) -> dict[str, Any]:
    engine = engines.get(spec.engine)
    context = execute.run_context(spec, plan, session.host, "check")
    launch = launches.of(context, render.launch_script(spec.template, context))
    flag_findings = await engine.launch_findings(session, launch.command, spec.template)
    flag_findings += await tool.findings(engine, session, spec, plan.workload or spec.workload, launch.port)
    overlay: dict[str, Path] = await stages.local_checkpoints(spec, launch.checkpoints)
    found = await engine.preflight(session, launch.command, launch.env, plan.patches, overlay, plan.allow)
    params = {k: launch.params.get(k) for k in ("model_path", "draft_model_path")}
    return {"variant": plan.variant, "point": plan.point, "repeat": plan.repeat, "host": session.host.name,
            "params": params,
            "findings": flag_findings + await _patch_findings(session, plan) + [f.as_json() for f in found]}


async def _patch_findings(session: HostSession, plan: RunPlan) -> list[dict[str, str]]:
    """Each patch prepared against the host's file (read only) and the results compiled there."""
    try:
        prepared = await execute.prepare_patches(session, plan)
    except PatchError as exc:
        return [{"severity": "error", "code": "patch-does-not-apply", "what": str(exc),
                 "why": "a run stops at it before changing anything", "fix": "fix the patch as the message says"}]
    return patchcheck.findings(await patchcheck.broken(session.conn, session.host, prepared), session.host)
