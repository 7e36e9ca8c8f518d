"""An experiment's own errors, found once on each host before its first run: every plan's launch
script renders (an undefined name, a sandbox refusal) and every distinct patch set applies to the
host's files (an anchor found 0 or 2 times, a file that is not there). Such an error is the
experiment's, not a run's: a 12-plan sweep with a bad anchor would otherwise record 12 identical
failed runs. Nothing on the host changes: files are only read."""

from __future__ import annotations

from orchestrator.core import render
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.errors import OrchError, PatchError, SpecError
from orchestrator.host.session import HostSession
from . import execute

PRECHECK_UID = "precheck"  # the run uid a script is rendered with here: no run exists yet


async def first_error(spec: Spec, plans: list[RunPlan], session: HostSession) -> OrchError | None:
    """The first of the experiment's own errors on this host, or None."""
    for plan in plans:
        try:
            render.launch_script(spec.template, execute.run_context(spec, plan, session.host, PRECHECK_UID))
        except SpecError as exc:
            return exc
    seen: set[tuple[tuple[str, str], ...]] = set()
    for plan in plans:
        patch_set = tuple((p.name, p.file) for p in plan.patches)
        if not patch_set or patch_set in seen:
            continue  # each distinct set read once against the host's files
        seen.add(patch_set)
        try:
            await execute.prepare_patches(session, plan)
        except (PatchError, SpecError) as exc:  # its message names the patch, its file:line and the host file
            return exc
    return None
