"""`orch revert`: every patch orch left applied on a host put back, and each file changed since
orch's last revert left it found (`drift.py`).

The revert itself is the host lifecycle's recovery (`lifecycle.Locking` with the purpose
"revert"): what it reverted and, with `force`, restored is read off it here."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from orchestrator.core.inventory import Host
from orchestrator.engines.base import Say
from orchestrator.errors import OrchError
from . import drift, lifecycle
from .journal import PatchRecord

if TYPE_CHECKING:  # the caller opens the database
    from orchestrator.store.database import Store

Reverted = tuple[PatchRecord, bool]  # (record, is a baseline): a file changed since a revert left it


async def revert_hosts(hosts: Iterable[Host], store: Store, say: Say, *,
                       force: bool = False) -> dict[str, list[Reverted] | OrchError]:
    """Each host's reverted (and, with `force`, restored) files; without `force`, each file changed
    since a revert left it too, as drifted. A host that failed gives its error."""
    async def one(held: lifecycle.Held) -> list[Reverted]:
        return await reverted(held, say, force)

    return await lifecycle.on_hosts(hosts, one, say, lifecycle.Locking("revert", store, force=force))


async def reverted(held: lifecycle.Held, say: Say, force: bool) -> list[Reverted]:
    """What the recovery of a locked host did, in the order it did it."""
    assert held.recovery is not None  # a Locking was given: the host was recovered
    for uid in held.recovery.interrupted:
        say(held.session.host.name, f"run {uid} marked interrupted: its controller died")
    found = [(r, False) for r in held.recovery.reverted] + [(r, True) for r in held.recovery.restored]
    return found if force else found + await changed_since_revert(held)


async def changed_since_revert(held: lifecycle.Held) -> list[Reverted]:
    """Each file that differs from what orch's last revert left it with, as drifted."""
    journal = held.session.journal
    found = await drift.find(held.session, [b.file for b in await journal.baseline_records()])
    return [(dataclasses.replace(d.records[0], state="drifted", backup=journal.baseline_paths(d.file)[1]), True)
            for d in found if d.baseline]
