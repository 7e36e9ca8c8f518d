"""Drift: a file orch patched that was changed by hand since orch last touched it. orch knows what it
left each file with from two records on the host, and nothing else counts as drift:

- a journal record its revert left `drifted`: the file changed while patched (during run R), and
  orch left it as it was; the file as installed is the record's `sha256_before` (its saved original);
- the file's baseline (`journal.py`): a revert put the file back to `sha256_before` and kept those
  bytes; the file now has another hash.

A file a live run of this command has patched (an applied record) is that run's, not drift. A file
orch never patched, or patched before baselines were kept, has nothing to differ from.

Drift found before a run's patch either stops the run before anything changes (the diff shown) or,
asked (`orch run --accept-drift`), is recorded and forgotten: the file as it is now becomes what the
run patches and what its revert restores. `orch revert --force` puts drifted files back instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from orchestrator.core import patching
from orchestrator.engines.base import Say
from .journal import DRIFTED, REVERTED, PatchRecord
from .session import HostSession

DIFF_LINES = 40  # a diff is shown and recorded up to this many lines
DIFF_LINE_CHARS = 200  # each cut to this many characters (a minified line is one long line)


@dataclass(frozen=True)
class Drift:
    host: str
    file: str
    records: tuple[PatchRecord, ...]  # the drifted journal records of the file, oldest first; or its baseline
    baseline: bool  # True: changed since a revert left it; False: changed while a run had it patched
    current: str | None  # its sha256 now
    diff: tuple[str, ...]  # what orch left -> what is there now, bounded

    @property
    def expected(self) -> str:
        """The sha256 orch left the file with (the file as installed)."""
        return self.records[0].sha256_before

    def since(self) -> str:
        run = self.records[0].run
        if self.baseline:
            return f"run {run}'s revert left it"
        return f"run {run} patched it (it changed during that run; the original is kept at {self.records[0].backup})"

    def summary(self) -> str:
        now = self.current[:12] if self.current else "missing"
        return (f"{self.host}:{self.file} was changed by hand since {self.since()} "
                f"(sha256 {self.expected[:12]} then, {now} now)")


async def find(session: HostSession, files: Iterable[str]) -> list[Drift]:
    """The drift of each of `files` on the session's host (see the module docstring)."""
    wanted = set(files)
    journal = session.journal
    records = await journal.status()
    covered = {r.file for r in records}
    drifted: dict[str, list[PatchRecord]] = {}
    for record in records:
        if record.state == DRIFTED and record.file in wanted:
            drifted.setdefault(record.file, []).append(record)
    found = []
    for file, own in drifted.items():
        found.append(await _drift(session, file, tuple(own), False, await _saved(session, own[0].backup)))
    for base in await journal.baseline_records():
        if base.file not in wanted or base.file in covered:
            continue
        current = await journal.digest(base.file)
        if current is not None and current != base.sha256_before:
            left = await _saved(session, journal.baseline_paths(base.file)[1])
            found.append(await _drift(session, base.file, (base,), True, left))
    return sorted(found, key=lambda d: d.file)


async def _saved(session: HostSession, path: str) -> bytes:
    """The bytes orch saved at `path`; empty when they are gone (the diff then shows the whole file)."""
    try:
        return await session.conn.read_file(path)
    except FileNotFoundError:
        return b""


async def _drift(session: HostSession, file: str, records: tuple[PatchRecord, ...], baseline: bool,
                 left: bytes) -> Drift:
    try:
        now = await session.conn.read_file(file)
    except FileNotFoundError:
        now = b""
    current = patching.sha256(now) if now or await session.conn.stat(file) is not None else None
    return Drift(session.host.name, file, records, baseline, current, bounded_diff(left, now, file))


def bounded_diff(left: bytes, now: bytes, file: str) -> tuple[str, ...]:
    """The unified diff from what orch left to what is there, cut to DIFF_LINES lines of at most
    DIFF_LINE_CHARS characters (control characters are shown as escapes where it is printed)."""
    lines = patching.unified(left.decode(errors="replace"), now.decode(errors="replace"), file.lstrip("/")).splitlines()
    shown = [line if len(line) <= DIFF_LINE_CHARS else line[:DIFF_LINE_CHARS] + " [...]" for line in lines[:DIFF_LINES]]
    if len(lines) > DIFF_LINES:
        shown.append(f"[... {len(lines) - DIFF_LINES} more diff lines]")
    return tuple(shown)


async def accept(session: HostSession, drifts: Iterable[Drift]) -> None:
    """Forget what orch expected of each drifted file: its bytes now are the install, which the
    next patch records as `sha256_before` and its revert puts back."""
    for drift in drifts:
        if drift.baseline:
            await session.journal.drop_baseline(drift.file)
        else:
            for record in drift.records:
                await session.journal.retire(record)


async def restore(session: HostSession, report: Say) -> list[PatchRecord]:
    """Every file changed since a revert left it put back to its baseline, each diff shown first
    (`orch revert --force`); the drifted journal records are the journal's own revert's. Returns
    each baseline restored (state reverted), or left drifted when the bytes could not be put back."""
    journal = session.journal
    done = []
    for drift in await find(session, [b.file for b in await journal.baseline_records()]):
        if not drift.baseline or drift.current is None:
            continue  # a file gone (its package removed): nothing to put the bytes into
        base = drift.records[0]
        left = await _saved(session, journal.baseline_paths(base.file)[1])
        if patching.sha256(left) != base.sha256_before:  # the kept bytes are not what orch left: write nothing
            report(session.host.name, f"warning: the bytes orch left {drift.file} with are gone from "
                   f"{journal.baselines}; left it as it is (reinstall its package to undo the change)")
            done.append(replace(base, state=DRIFTED))
            continue
        report(session.host.name, f"restoring {drift.file} to what {drift.since()}; the change being undone:\n"
               + "\n".join(drift.diff))
        await session.conn.write_file(drift.file, left)
        await journal.settle(drift.file)
        state = REVERTED if await journal.digest(drift.file) == base.sha256_before else DRIFTED
        done.append(replace(base, state=state))
    return done
