"""The host-side record of every change orch makes to a host's files, used to revert them.

Order of acts when patching one file (each step durable before the next):
  1. the original bytes are saved next to the record (`<seq>.orig`);
  2. the record is written (`<seq>.json`: file, hashes, mode, owner, backup path), and the
     journal folder is fsynced so both renames survive a power cut;
  3. the original is kept beside the target (`restore`: a hard link to its inode, else a copy),
     so a revert is a rename, which needs no free space on a disk filled during the run;
  4. the new text is written to a temporary file in the target's folder, fsynced, given the
     target's mode and owner and renamed over it; the folder is fsynced;
  5. the target's stale `__pycache__` entries are removed.
A crash between any two steps leaves a record that `revert` can finish: the file's hash is
either the "before" hash (nothing to undo) or the "after" hash (restore the saved bytes). A
crash before step 2 leaves at most a saved original without a record, which `sweep` removes.

A revert that put a file back keeps what it left as the file's *baseline* (`<workdir>/baselines/`:
the last record of that file and its original, moved there by two renames, so a full disk does not
stop it): the bytes orch left the file with. A file that differs from its baseline was changed by
hand since (`drift.py`): the next run does not patch on top of it unasked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from orchestrator.core import patching, shell
from orchestrator.errors import HostError, PatchError
from orchestrator.remote import Connection
from orchestrator.core.spec import PatchDef
from . import diskspace

APPLIED, REVERTED, DRIFTED, PENDING = "applied", "reverted", "drifted", "pending"


def restore_path(file: str, run: str, seq: int) -> str:
    """Where the original of `file` is kept beside it while patched: a dot-file Python never imports."""
    folder, _, name = file.rpartition("/")
    return f"{folder}/.{name}.orch-original-{run}-{seq:03d}"


@dataclass(frozen=True)
class PatchRecord:
    run: str
    seq: int
    name: str
    target: str  # as written in the experiment, e.g. sglang:srt/models/llama_eagle3.py
    file: str  # the resolved path on the host
    sha256_before: str
    sha256_after: str
    backup: str
    mode: int
    uid: int
    gid: int
    state: str = APPLIED
    restore: str = ""  # the original kept beside the file (a revert renames it back); "" in older records


def _reached(record: PatchRecord, later: list[PatchRecord]) -> set[str]:
    """The hashes the file may have with `record` applied: its own after, or the after of each later
    patch of the same file chained on top of it (two patches of one run to one file: the first's
    after is the second's before), so a file patched twice is not drift of its first patch."""
    reached, head = {record.sha256_after}, record.sha256_after
    for other in later:
        if other.file == record.file and other.sha256_before == head:
            head = other.sha256_after
            reached.add(head)
    return reached


class Journal:
    def __init__(self, conn: Connection, workdir: str):
        self.conn = conn
        self.root = f"{workdir.rstrip('/')}/journal"
        self.baselines = f"{workdir.rstrip('/')}/baselines"  # what each revert left (module docstring)
        self._made: set[str] = set()  # the runs' journal folders made by this session
        # told after every file a patch or a revert changed: its session's reads of them are stale
        self.on_change: Callable[[], None] = lambda: None

    def _dir(self, run: str) -> str:
        return f"{self.root}/{run}"

    async def prepare(self, patch: PatchDef, file: str, before: bytes | None = None) -> tuple[bytes, bytes]:
        """The file's current (or the given, already patched) bytes and the patched bytes; raises
        before anything changes."""
        where = f"{self.conn.host.name}:{file}"
        if before is None:
            try:
                before = await self.conn.read_file(file)
            except FileNotFoundError:
                raise PatchError(f"{patch.where}: patch '{patch.name}': {where} does not exist; check `file:`") from None
        try:
            text = before.decode()
        except UnicodeDecodeError:
            raise PatchError(f"{patch.where}: patch '{patch.name}': {where} is not UTF-8 text") from None
        return before, patching.apply(patch, text, where).encode()

    async def apply(self, run: str, seq: int, patch: PatchDef, file: str, before: bytes, after: bytes) -> PatchRecord:
        """Journal, back up and write one patched file (see the module docstring for the order)."""
        st = await self.conn.stat(file)
        assert st is not None
        base = f"{self._dir(run)}/{seq:03d}"
        record = PatchRecord(
            run=run, seq=seq, name=patch.name, target=patch.file, file=file,
            sha256_before=patching.sha256(before), sha256_after=patching.sha256(after),
            backup=f"{base}.orig", mode=st.mode, uid=st.uid, gid=st.gid, restore=restore_path(file, run, seq),
        )
        if self._dir(run) not in self._made:  # once per run, not per patch (a revert may remove it: see _forget)
            await self.conn.run(shell.mkdir(self._dir(run)), idempotent=True)
            self._made.add(self._dir(run))
        await self.conn.write_file(record.backup, before, mode=0o600)
        await self._write_record(record)
        await self._sync(self._dir(run), self.root)
        await self._keep_original(record)
        try:
            await self.conn.write_file(file, after)
        except BaseException:
            self.on_change()  # whether it was renamed into place before the failure is unknown
            raise
        await self._settle(file)
        return record

    async def _keep_original(self, record: PatchRecord) -> None:
        """The original beside the file before it changes (the record names it, so a crash here
        leaves nothing the revert does not remove); a disk too full for even that stops the patch."""
        done = await self.conn.run(shell.keep_original(record.file, record.restore), idempotent=True)
        if not done.ok:
            await self.conn.run(shell.remove_files(record.restore), idempotent=True)
            disk = await diskspace.described(self.conn, self.conn.host, record.file)
            raise HostError(f"{self.conn.host.name}: cannot keep the original of {record.file} beside it on {disk} "
                            f"({done.err.strip()[-200:]}); patch '{record.name}' was not applied; free space there")

    async def _sync(self, *paths: str) -> None:
        """Make the renames into these folders durable (SFTP cannot fsync a folder)."""
        await self.conn.run(shell.sync_paths(*paths), idempotent=True)

    async def _settle(self, file: str) -> None:
        """After a file changed: fsync its folder, drop its bytecode and any temporary file a killed
        writer left beside it, in one round trip."""
        folder = file.rsplit("/", 1)[0] or "/"
        try:
            await self.conn.run("; ".join([shell.sync_paths(folder), shell.remove_pycache(file),
                                           shell.remove_stale_temps(file)]), idempotent=True)
        finally:
            self.on_change()

    async def sweep(self) -> None:
        """Remove what a killed controller left besides records (see `shell.sweep_journal`).
        Only under the host lock: a live run's files are never swept."""
        await self.conn.run(shell.sweep_journal(self.root), idempotent=True)

    async def status(self) -> list[PatchRecord]:
        """Records on the host with the state their file is in now: applied (the patched bytes),
        drifted (changed since, or marked so), or pending (the original bytes: a crash came
        between the record and the rename, or between restoring and forgetting)."""
        records = await self.records()
        digests = {file: await self._digest(file) for file in dict.fromkeys(r.file for r in records)}
        current = []
        for i, record in enumerate(records):
            digest = digests[record.file]
            if record.state != DRIFTED and digest in _reached(record, records[i + 1:]):
                current.append(replace(record, state=APPLIED))
            elif record.state != DRIFTED and digest == record.sha256_before:
                current.append(replace(record, state=PENDING))
            else:
                current.append(replace(record, state=DRIFTED))
        return current

    async def digest(self, file: str) -> str | None:
        """The sha256 of the file on the host now; None when it does not exist."""
        return await self._digest(file)

    async def _digest(self, file: str) -> str | None:
        try:
            return patching.sha256(await self.conn.read_file(file))
        except FileNotFoundError:
            return None

    async def records(self, run: str | None = None) -> list[PatchRecord]:
        """Records still on the host (applied or drifted), oldest first."""
        pattern = f"{run}/*.json" if run else "*/*.json"
        done = await self.conn.run(shell.cat_records(self.root, pattern), idempotent=True)
        records = [PatchRecord(**json.loads(line)) for line in done.out.splitlines() if line.strip()]
        return sorted(records, key=lambda r: (r.run, r.seq))

    async def revert(self, run: str | None = None, *, force: bool = False) -> list[PatchRecord]:
        """Undo recorded patches newest first; a file changed under us is left alone (drifted)
        unless `force`, in which case the saved original is restored."""
        results = []
        for record in reversed(await self.records(run)):
            results.append(await self._revert_one(record, force=force))
        return results

    async def _revert_one(self, record: PatchRecord, *, force: bool) -> PatchRecord:
        current = await self._digest(record.file)
        if current == record.sha256_before:  # never renamed, or restored before a crash
            await self._settle(record.file)
            await self._forget(record)
            return replace(record, state=REVERTED)
        if current != record.sha256_after and not force:
            drifted = replace(record, state=DRIFTED)
            if record.state != DRIFTED:
                await self._write_record(drifted)
            return drifted
        await self._restore(record)
        await self._settle(record.file)
        if await self._digest(record.file) != record.sha256_before:
            kept = replace(record, state=DRIFTED)
            await self._write_record(kept)
            return kept
        await self._forget(record)
        return replace(record, state=REVERTED)

    async def _restore(self, record: PatchRecord) -> None:
        """The original back in place: its kept copy renamed over the file (no new space needed),
        else the journal's copy written (needs the file's size free beside it)."""
        try:
            await self._put_back(record)
        finally:
            self.on_change()

    async def _put_back(self, record: PatchRecord) -> None:
        if record.restore and await self._digest(record.restore) == record.sha256_before:
            done = await self.conn.run(shell.rename_over(record.restore, record.file), idempotent=True)
            if done.ok or await self._digest(record.file) == record.sha256_before:  # (a resent rename fails: done)
                return
        original = await self.conn.read_file(record.backup)
        try:
            await self.conn.write_file(record.file, original, mode=record.mode)
        except HostError as exc:
            disk = await diskspace.described(self.conn, self.conn.host, record.file)
            raise HostError(f"{exc}; on {disk}: patch '{record.name}' of run {record.run} is left applied to "
                            f"{record.file} (original saved at {record.backup}); free space there, then "
                            f"`orch revert --host {self.conn.host.name}`") from None

    async def _write_record(self, record: PatchRecord) -> None:
        data = (json.dumps(asdict(record), sort_keys=True) + "\n").encode()
        await self.conn.write_file(f"{self._dir(record.run)}/{record.seq:03d}.json", data, mode=0o600)

    async def _forget(self, record: PatchRecord) -> None:
        """The record gone once its file holds `sha256_before` again, kept as the file's baseline."""
        await self._keep_baseline(record)
        await self.retire(record)

    async def retire(self, record: PatchRecord) -> None:
        """The record, its saved original and its kept copy removed (no baseline kept)."""
        base = f"{self._dir(record.run)}/{record.seq:03d}"
        kept = [record.restore] if record.restore else []
        self._made.discard(self._dir(record.run))
        await self.conn.run(
            shell.remove_files(f"{base}.json", f"{base}.orig", *kept) + "; " + shell.remove_empty_dir(self._dir(record.run)),
            idempotent=True,
        )

    def baseline_paths(self, file: str) -> tuple[str, str]:
        """Where the baseline of `file` is kept: its record and its bytes."""
        key = f"{self.baselines}/{hashlib.sha256(file.encode()).hexdigest()[:24]}"
        return f"{key}.json", f"{key}.orig"

    async def _keep_baseline(self, record: PatchRecord) -> None:
        """The record and its original moved to the file's baseline (bytes first: a baseline record
        always has its bytes). A disk too full for the folder costs the baseline, never the revert."""
        base = f"{self._dir(record.run)}/{record.seq:03d}"
        kept, original = self.baseline_paths(record.file)
        await self.conn.run(f"{shell.mkdir(self.baselines)} && {shell.rename_over(f'{base}.orig', original)} && "
                            f"{shell.rename_over(f'{base}.json', kept)}; true", idempotent=True)

    async def baseline_records(self) -> list[PatchRecord]:
        """The baseline of every file orch patched and put back: `sha256_before` is what it left."""
        done = await self.conn.run(shell.cat_records(self.baselines, "*.json"), idempotent=True)
        return [PatchRecord(**json.loads(line)) for line in done.out.splitlines() if line.strip()]

    async def drop_baseline(self, file: str) -> None:
        """Forget what orch left `file` with: its bytes now are what the next revert keeps."""
        await self.conn.run(shell.remove_files(*self.baseline_paths(file)), idempotent=True)

    async def drop_baselines_under(self, folder: str) -> None:
        """Forget the baselines of every file under `folder` (a tree orch itself replaced)."""
        inside = [r.file for r in await self.baseline_records() if r.file.startswith(folder.rstrip("/") + "/")]
        if inside:
            await self.conn.run(shell.remove_files(*(p for f in inside for p in self.baseline_paths(f))),
                                idempotent=True)

    async def settle(self, file: str) -> None:
        await self._settle(file)
