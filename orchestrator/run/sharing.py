"""One patch set applied once for every run that runs with it on a host at once.

GPU slots (`slots.py`) let runs that patch the installed files share a host only when their patch
sets are identical, so they all import the same patched files (a run with another set gets its
own patched copy instead: `host/overlay.py`, and its copy keeps the original text of the files
this set patches: `originals`). Applying the set once per run would patch patched files (an
`insert_after` twice) and the first run's revert would unpatch the files under the runs still going.
So, per host (its journal):

- the first run of a set (the holder) applies it through the journal as usual, under its own uid;
- a run with the same set that comes while it is applied joins: its patch rows copy the holder's,
  nothing is written, an event names the holder;
- a run that leaves while others of the set still run leaves the files as they are (an event says
  so); the last one reverts the holder's journal records and sets the patch states of every run
  that used them.

A controller that dies leaves the holder's journal records, which recovery reverts as any others.
"""

from __future__ import annotations

import asyncio
import enum
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.core.spec import PatchDef
from orchestrator.errors import PatchError
from orchestrator.host.journal import Journal
from orchestrator.store.rowid import stored_id
from orchestrator.host.patchcheck import Prepared
from orchestrator.host.session import HostSession
from . import slots
from .attempt import Attempt

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import PatchRow, Run


class State(enum.Enum):
    APPLYING = "applying"
    APPLIED = "applied"
    FAILED = "failed"  # the holder's apply raised: its own revert undoes what it wrote
    REVERTING = "reverting"


@dataclass(eq=False)
class Shared:
    """A patch set applied on one host, and the runs using it."""

    patches: tuple[PatchDef, ...]
    holder: Run  # whose journal records hold the originals
    prepared: list[Prepared]
    members: set[int]  # ids of the runs using the patched files now
    users: list[Run]  # every run that used them: their patch states are set at the end
    rows: list[PatchRow] = field(default_factory=list)
    state: State = State.APPLYING
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # applied or failed
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # reverted: the files are the originals


KEPT = "kept"  # leave(): other runs of the set still run; nothing to revert now

_applied: weakref.WeakKeyDictionary[Journal, dict[tuple[PatchDef, ...], Shared]] = weakref.WeakKeyDictionary()


def _sets(journal: Journal) -> dict[tuple[PatchDef, ...], Shared]:
    return _applied.setdefault(journal, {})


async def _current(journal: Journal, patches: tuple[PatchDef, ...]) -> Shared | None:
    """The set as applied now, once it is settled; None when no run holds it (or it was just reverted)."""
    while (shared := _sets(journal).get(patches)) is not None:
        if shared.state is State.APPLYING:
            await shared.settled.wait()
        elif shared.state is State.REVERTING:
            await shared.gone.wait()
        elif shared.state is State.FAILED:
            raise PatchError(f"the same patch set failed to apply for run {shared.holder.id} on "
                             f"{journal.conn.host.name}; see that run")
        else:
            return shared
    return None


async def prepared_for(journal: Journal, patches: tuple[PatchDef, ...]) -> list[Prepared] | None:
    """The prepared patches of the set when another run has it applied (relative to the original
    files), else None: prepare them from the files."""
    shared = await _current(journal, patches) if patches else None
    return shared.prepared if shared is not None else None


async def join(attempt: Attempt) -> bool:
    """Join the set if another run has it applied: True (nothing to write), else False."""
    from orchestrator.store.database import PatchRow
    patches = attempt.plan.patches
    shared = await _current(attempt.session.journal, patches) if patches else None
    if shared is None:
        return False
    run = attempt.run
    for row in shared.rows:
        attempt.store.add(PatchRow(run_id=stored_id(run), seq=row.seq, name=row.name, target=row.target, file=row.file,
                                   sha256_before=row.sha256_before, sha256_after=row.sha256_after, state=row.state))
    shared.members.add(run.id or 0)
    shared.users.append(run)
    attempt.store.event(run, "patches-shared", f"its patch set is applied once, by run {shared.holder.id} "
                        f"({shared.holder.uid}); it stays applied until the last run of the set on the host ends")
    attempt.say(f"patches shared with run {shared.holder.id} (same patch set)")
    return True


def begin(attempt: Attempt, prepared: list[Prepared]) -> Shared | None:
    """The attempt applies the set: runs with the same set wait for it (None: no patches)."""
    if not attempt.plan.patches:
        return None
    run = attempt.run
    shared = Shared(attempt.plan.patches, run, prepared, {run.id or 0}, [run])
    _sets(attempt.session.journal)[shared.patches] = shared
    return shared


def settle(shared: Shared | None, rows: list[PatchRow] | None) -> None:
    """The holder's apply ended: with its rows (applied), or None (it failed)."""
    if shared is None:
        return
    shared.rows = rows or []
    shared.state = State.APPLIED if rows is not None else State.FAILED
    shared.settled.set()


def leave(attempt: Attempt) -> Shared | str | None:
    """The attempt's run is done with its patches: None (not shared: revert its own), KEPT (others
    still use them), or the set to revert now (the last user; call `forget` once reverted)."""
    shared = _sets(attempt.session.journal).get(attempt.plan.patches) if attempt.plan.patches else None
    if shared is None or (attempt.run.id or 0) not in shared.members:
        return None
    shared.members.discard(attempt.run.id or 0)
    if shared.members:
        return KEPT
    shared.state = State.REVERTING
    return shared


def used_by(attempt: Attempt, run: Run) -> None:
    """`run` uses the patched files through the server `attempt`'s run launched (server reuse): its
    patch states are set with those of the set's other users."""
    shared = _sets(attempt.session.journal).get(attempt.plan.patches) if attempt.plan.patches else None
    if shared is not None and (attempt.run.id or 0) in shared.members:
        shared.users.append(run)


def forget(attempt: Attempt, shared: Shared) -> None:
    _sets(attempt.session.journal).pop(shared.patches, None)
    shared.settled.set()
    shared.gone.set()


async def originals(session: HostSession) -> dict[str, bytes]:
    """The original text of each file that the set applied in place on the host now patches (its
    runs' slots say which set): what an isolated run's copy holds for them. Read first, then taken
    from the set's prepared texts if it has begun writing by then (its holder prepared them from the
    files before writing any): no await comes between that check and the answer."""
    patches = slots.in_place(session.host.name)
    files = list(dict.fromkeys([await session.resolve(p) for p in patches]))
    texts = {}
    for file in files:
        try:
            texts[file] = await session.conn.read_file(file)
        except FileNotFoundError:
            continue  # its run fails to prepare that patch: it never writes there
    shared = _sets(session.journal).get(patches) if patches else None
    if shared is not None:
        for _, file, before, _ in reversed(shared.prepared):  # the first patch of a file saw its original
            texts[file] = before
    return texts
