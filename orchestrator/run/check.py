"""`orch check`: every finding for every run an experiment would make, on the host it would run on
(flags, patches, checkpoints), with one connection per host and nothing pushed, patched or launched."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.host import checkpoint, patchcheck, rehearsal
from . import execute
from orchestrator import engines
from orchestrator.core import render
from orchestrator.errors import PatchError
from orchestrator.core.inventory import Host
from orchestrator.host.session import HostSession
from orchestrator.core.spec import RunPlan, Spec


async def check_plans(spec: Spec, plans: list[RunPlan], hosts: list[Host]) -> list[dict[str, Any]]:
    """One group per (variant, host): flags the host's engine would reject, patches that would not
    apply or would leave a file that does not compile, then the checkpoint findings (an error the
    experiment allows comes marked `allowed`). Checkpoints are read from their local (transformed)
    copies."""
    prepared = {c.name: await asyncio.to_thread(checkpoint.prepare, c) for c in spec.checkpoints}
    groups: list[dict[str, Any]] = []
    for name, queue in execute.schedule(plans, hosts).items():
        host = next(h for h in hosts if h.name == name)
        session = await HostSession.open(host)
        try:
            if host.rehearsal:
                await rehearsal.install(session.conn, session.host, engines.get(spec.engine))
            for plan in queue:
                groups.append(await _check_one(spec, plan, session, prepared))
        finally:
            await session.conn.close()
    return groups


async def _check_one(spec: Spec, plan: RunPlan, session: HostSession, prepared: dict[str, Any]) -> dict[str, Any]:
    engine = engines.get(spec.engine)
    context = execute.run_context(spec, plan, session.host, "check")
    script = render.launch_script(spec.template, context)
    flag_findings = await engine.launch_findings(session, script, spec.template)
    overlay = {context["checkpoints"][n]: p.folder for n, p in prepared.items()}
    found = await engine.preflight(session, context["params"], context["env"], plan.patches, overlay, plan.allow)
    params = {k: context["params"].get(k) for k in ("model_path", "draft_model_path")}
    return {"variant": plan.variant, "host": session.host.name, "params": params,
            "findings": flag_findings + await _patch_findings(session, plan) + [f.as_json() for f in found]}


async def _patch_findings(session: HostSession, plan: RunPlan) -> list[dict[str, str]]:
    """Each patch prepared against the host's file (read only) and the results compiled there."""
    try:
        prepared = await execute.prepare_patches(session, plan)
    except PatchError as exc:
        return [{"severity": "error", "code": "patch-does-not-apply", "what": str(exc),
                 "why": "a run stops at it before changing anything", "fix": "fix the patch as the message says"}]
    return patchcheck.findings(await patchcheck.broken(session.conn, session.host, prepared), session.host)
