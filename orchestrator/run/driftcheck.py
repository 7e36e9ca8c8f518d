"""The run's check for drift (`host/drift.py`) before anything on the host changes: a file its patches
target that was changed by hand since orch left it stops the run (exit 2, its diff shown), unless the
run was asked to go on (`orch run --accept-drift`): then each drift is an event of the run, with its
diff, and the file as it is now is what the run patches (its `sha256_before`)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core.spec import RunPlan
from orchestrator.errors import PatchError
from orchestrator.host import drift
from orchestrator.host.session import HostSession
from .attempt import Attempt


async def found(session: HostSession, plan: RunPlan, accepted: bool, say: Callable[[str], None]) -> list[drift.Drift]:
    """The drift of the plan's patched files on the session's host, each said with its diff; a
    PatchError naming the first (and the commands that resolve it) unless `accepted`."""
    files = [await session.resolve(patch) for patch in plan.patches]
    drifts = await drift.find(session, files) if files else []
    for each in drifts:
        say(f"{each.summary()}; what orch left -> what is there now:\n" + "\n".join(each.diff))
    if drifts and not accepted:
        first, host = drifts[0], session.host.name
        more = f" (and {len(drifts) - 1} more file(s), shown above)" if len(drifts) > 1 else ""
        raise PatchError(f"{first.summary()}{more}: a patch on top of it would measure that edit too; "
                         f"`orch revert --host {host} --force` puts back what orch left, or "
                         "`orch run --accept-drift` patches the file as it is now (recorded with the run); "
                         "nothing was changed", evidence=first.diff)
    return drifts


async def gate(attempt: Attempt) -> None:
    """`found` on the run's host and every other node's; accepted drift recorded, then forgotten."""
    for part in (attempt, *attempt.peers):
        drifts = await found(part.session, part.plan, part.spec.accept_drift, part.say)
        for each in drifts:
            part.store.event(part.run, "drift-accepted", f"orch run --accept-drift: {each.summary()}; patched as it "
                             "is now:\n" + "\n".join(each.diff))
            part.warn(f"{each.host}:{each.file} was changed by hand since orch left it; patched as it is now "
                      "(--accept-drift)")
        await drift.accept(part.session, drifts)
