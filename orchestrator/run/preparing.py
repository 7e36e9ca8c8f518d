"""A run's patches prepared against the host's files, before any file changes."""

from __future__ import annotations

from orchestrator.core.spec import PatchDef, RunPlan
from orchestrator.host import overlay
from orchestrator.host.session import HostSession
from . import sharing


async def prepare_patches(session: HostSession, plan: RunPlan) -> list[tuple[PatchDef, str, bytes, bytes]]:
    """Every patch checked against the host's files before any file changes; patches to the
    same file apply on top of each other, in order. A patch set another run on the host has applied
    now is that run's, prepared against the original files (`sharing.py`). An isolated run's
    patches apply to the original text too, whatever set is applied in place now (`sharing.originals`)."""
    isolated = overlay.PARAM in plan.params
    shared = None if isolated else await sharing.prepared_for(session.journal, plan.patches)
    if shared is not None:
        return shared
    current: dict[str, bytes] = await sharing.originals(session) if isolated else {}
    prepared = []
    for patch in plan.patches:
        file = await session.resolve(patch)
        before, after = await session.journal.prepare(patch, file, current.get(file))
        current[file] = after
        prepared.append((patch, file, before, after))
    return prepared
