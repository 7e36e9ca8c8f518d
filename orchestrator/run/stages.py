"""The pieces of a run's stages that take one node's `Attempt` and do one thing each; the stage
list (`lifecycle.py`, `bringup.py`, `teardown.py`) calls them in order (see `attempt.Stage`)."""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core import patching, shell
from orchestrator.errors import HostError
from orchestrator.core.spec import Spec
from orchestrator.host import checkpoint, overlay, server
from orchestrator.host.journal import APPLIED, DRIFTED, REVERTED
from orchestrator.host.patchcheck import Prepared
from orchestrator.store.rowid import stored_id
from . import sharing, slots
from .attempt import Attempt

if TYPE_CHECKING:  # the ORM is imported where rows are written
    from orchestrator.store.database import PatchRow, Run


async def push_checkpoints(attempt: Attempt) -> None:
    """Every checkpoint of the experiment to its dest on the host, recorded with the run."""
    from orchestrator.store.database import CheckpointRow
    spec = attempt.spec
    if not spec.checkpoints:
        return
    try:
        pushed = await checkpoint.push_for_run(spec.checkpoints, attempt.session.conn, attempt.launch.checkpoints,
                                               lambda name: attempt.reporter.transfer(f"{attempt.label} {name}"))
    finally:
        attempt.session.reads.clear()  # the preflight reads what was pushed
    for prepared, result in pushed:
        attempt.store.add(CheckpointRow(
            run_id=stored_id(attempt.run), name=prepared.name, dest=result.dest, source_hash=prepared.source_hash,
            transforms=list(prepared.transforms), result_hash=prepared.result_hash, manifest_hash=result.manifest,
            files=result.files, total_bytes=result.total_bytes, sent_files=result.sent_files,
            sent_bytes=result.sent_bytes, seconds=result.seconds))
        moved = f"{result.sent_files} of {result.files} files, {result.sent_bytes / 2**20:.1f} MiB moved"
        attempt.say(f"checkpoint {prepared.name} -> {result.dest}: {moved} in {result.seconds:.1f} s "
                    f"(manifest {result.manifest[:12]})")


async def local_checkpoints(spec: Spec, dests: Mapping[str, str]) -> dict[str, Path]:
    """Each checkpoint's rendered dest (`Launch.checkpoints`) -> its local (transformed) copy: what
    a preflight reads before anything is pushed (dry run, `orch check`)."""
    return {dests[c.name]: (await asyncio.to_thread(checkpoint.prepare, c)).folder for c in spec.checkpoints}


async def apply_patches(attempt: Attempt, prepared: list[Prepared]) -> None:
    """Each prepared patch applied, its journal record written before the file changes; nothing
    written when another run on the host has the same patch set applied (`sharing.py`); an
    isolated run's go to its own copy of their packages instead (`slots.py`)."""
    from orchestrator.store.database import PatchRow
    if attempt.launch.site is not None:  # isolated
        return await _patch_a_copy(attempt, prepared, attempt.launch.site)
    if await sharing.join(attempt):
        return
    # begun with no await after the join: a run of the same set that comes meanwhile waits for this
    # apply and joins it, instead of applying the set a second time over the same files
    shared = sharing.begin(attempt, prepared)
    rows: list[PatchRow] | None = None
    try:
        await _ensure_writable(attempt, prepared)
        rows = []
        for seq, (patch, file, before, after) in enumerate(prepared, 1):
            record = await attempt.session.journal.apply(attempt.run.uid, seq, patch, file, before, after)
            row = PatchRow(run_id=stored_id(attempt.run), seq=seq, name=patch.name, target=patch.file, file=file,
                           sha256_before=record.sha256_before, sha256_after=record.sha256_after, state=APPLIED,
                           node=attempt.node)
            attempt.store.add(row)
            rows.append(row)
            attempt.say(f"patched {file} ({patch.name})")
    except BaseException:
        rows = None
        raise
    finally:
        sharing.settle(shared, rows)


async def _ensure_writable(attempt: Attempt, prepared: list[Prepared]) -> None:
    """Refuse, before the journal writes anything, a patch into a folder the host's user cannot
    write (a read-only package folder): one host error, the host untouched."""
    if not prepared:
        return
    done = await attempt.session.conn.run(shell.unwritable_folders([file for _, file, _, _ in prepared]),
                                          idempotent=True)
    folders = [line for line in done.out.splitlines() if line.strip()]
    if not folders:
        return
    patch, file = next(((p, f) for p, f, _, _ in prepared if posixpath.dirname(f) == folders[0]),
                       (prepared[0][0], prepared[0][1]))
    raise HostError(f"{attempt.launch.host}: cannot write {folders[0]} (a read-only file system, or no "
                    f"write permission), so patch '{patch.name}' cannot change {file}; nothing was changed; make "
                    "the folder writable, or install the package where orch may write (a virtual environment "
                    "of your own)")


async def _patch_a_copy(attempt: Attempt, prepared: list[Prepared], site: str) -> None:
    """The run's own copy of the packages its patches (and the set applied in place now) touch,
    holding its patched text and the original text of that set's files (`host/overlay.py`)."""
    from orchestrator.store.database import PatchRow
    session, store, run = attempt.session, attempt.store, attempt.run
    texts = await sharing.originals(session)  # resolves the in-place set's targets: their packages are known
    for _, file, _, after in prepared:
        texts[file] = after  # prepared from the original text (`execute.prepare_patches`)
    names = {overlay.package_of(p) for p in (*attempt.plan.patches, *slots.in_place(session.host.name))}
    packages = {name: session.packages[name] for name in sorted(n for n in names if n)}
    copy = await overlay.build(session.conn, site, packages, texts)
    for seq, (patch, file, before, after) in enumerate(prepared, 1):
        store.add(PatchRow(run_id=stored_id(run), seq=seq, name=patch.name, target=patch.file, file=copy.files[file],
                           sha256_before=patching.sha256(before), sha256_after=patching.sha256(after), state=APPLIED))
        attempt.say(f"patched {copy.files[file]} ({patch.name}, own copy)")
    store.event(run, "isolated", f"patched copy of {', '.join(packages)} at {site}, first on the run's PYTHONPATH; "
                                 f"installed files untouched")


async def _remove_copy(attempt: Attempt, owner: Attempt, site: str, users: Sequence[Run]) -> list[str]:
    """An isolated run's revert: its copy (`site`) removed (the installed files never changed)."""
    from orchestrator.store.database import PatchRow
    await overlay.remove(attempt.session.conn, site)
    rows = attempt.store.children(owner.run, PatchRow)
    for user in users:
        attempt.store.set_patch_states(user, {row.seq: REVERTED for row in rows})
    attempt.store.event(attempt.run, "copy-removed", f"its patched copy {site} removed; installed files untouched")
    attempt.say(f"removed the patched copy {site}")
    return []


async def stop(attempt: Attempt, srv: server.Server | None) -> bytes:
    """Stop the server, whatever happened before; returns its whole log (empty without a server)."""
    if srv is None:
        return b""
    conn = attempt.session.conn
    stopped = await server.stop(conn, srv)
    summary = stopped.summary(server.STOP_GRACE_SECONDS)
    attempt.store.event(attempt.run, "stopped", summary)
    if not stopped.gone:
        attempt.warn(f"server {summary}")
    elif stopped.killed or stopped.strays:
        attempt.say(f"server {summary}")
    return await server.read_log(conn, srv, attempt.engine, attempt.spec.debug_pattern)


async def revert_patches(attempt: Attempt, owner: Attempt | None = None, also: Sequence[Run] = ()) -> list[str]:
    """Revert this run's patches (those of its patch set, when it is the last run of a shared set;
    none while others of the set still run). Returns the files that changed under us and were left alone (drifted).
    `owner`: the run that launched the server this run used (server reuse, `serving.py`), whose
    patches they are; `also`: the other runs that used that server (their patch states are set too)."""
    host, store, run = attempt.launch.host, attempt.store, attempt.run
    owner = owner or attempt
    if owner.launch.site is not None:  # isolated
        return await _remove_copy(attempt, owner, owner.launch.site, [owner.run, *also])
    shared = sharing.leave(owner)
    if shared == sharing.KEPT:
        store.event(run, "patches-kept", "left applied: another run on the host runs with the same patch set")
        attempt.say("patches left applied for the other runs of the same patch set")
        return []
    holder, users = (shared.holder, shared.users) if isinstance(shared, sharing.Shared) else (owner.run, [owner.run])
    users = [*users, *(u for u in also if u not in users)]
    try:
        reverted = await attempt.session.journal.revert(holder.uid)
    finally:
        if isinstance(shared, sharing.Shared):
            sharing.forget(owner, shared)
    if not reverted:
        return []
    for user in users:
        store.set_patch_states(user, {r.seq: r.state for r in reverted}, attempt.node)
    drifted = [r for r in reverted if r.state == DRIFTED]
    for r in drifted:
        message = (f"{host}:{r.file} changed during the run; left as it is. Original saved at "
                   f"{r.backup}; `orch revert --host {host} --force` restores it")
        store.event(run, "drifted", message)
        attempt.say(message)
    attempt.say(f"reverted {len(reverted) - len(drifted)} patch(es)")
    return [f"{host}:{r.file}" for r in drifted]
