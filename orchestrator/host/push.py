"""Push a local checkpoint folder to a host: only files whose sha256 differs move, each to a
temporary name that is renamed when complete, several at once; an interrupted push resumes.

Manifests (relative path, size, sha256) are cached by (size, mtime) on both sides, so an
unchanged re-push hashes nothing: locally under the cache folder, on the host in
`<dest>/.orch-manifest.json`.

Each file keeps its mode bits on the host (`filemodes.py`); a link is pushed as what it points to,
its bytes and its mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core import shell
from orchestrator.errors import SpecError
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed
from . import filemodes

HOST_MANIFEST = ".orch-manifest.json"
PART_SUFFIX = ".orch-part"
FILES_AT_ONCE = 4
HASH_CHUNK = 4 * 2**20
HASH_BATCH = 200  # files per remote hashing command
Progress = Callable[[str, int], None]  # ("total", bytes to move), ("advance", n)..., then ("end", 0) whatever happened


@dataclass(frozen=True)
class Entry:
    path: str  # relative, POSIX
    size: int
    sha256: str
    mode: int = 0o644  # permission bits; not part of the digest: a chmod is not another checkpoint


@dataclass(frozen=True)
class Manifest:
    entries: tuple[Entry, ...]

    @property
    def digest(self) -> str:
        """One hash for the whole folder: what the run records."""
        text = "".join(f"{e.path}\0{e.size}\0{e.sha256}\n" for e in sorted(self.entries, key=lambda e: e.path))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


@dataclass(frozen=True)
class PushResult:
    dest: str
    manifest: str
    files: int
    total_bytes: int
    sent_files: int
    sent_bytes: int
    resumed_bytes: int  # bytes of partial files from an interrupted push that did not move again
    seconds: float
    modes_set: int = 0  # files whose mode on the host was set to the local one (sent or not)


def cache_root() -> Path:
    return Path(os.environ.get("ORCH_CACHE") or Path.home() / ".cache" / "orch")


def _skipped(name: str) -> bool:
    return name == HOST_MANIFEST or name.endswith(PART_SUFFIX)


def file_sha256(path: Path, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    left = limit
    with open(path, "rb") as handle:
        while left is None or left > 0:
            chunk = handle.read(HASH_CHUNK if left is None else min(HASH_CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            if left is not None:
                left -= len(chunk)
    return digest.hexdigest()


def local_manifest(folder: Path, cache: Path | None = None) -> Manifest:
    """Every file under `folder` with its hash; files whose (size, mtime) match the cache are not re-read."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    cache_file = (cache or cache_root()) / "manifests" / (hashlib.sha256(str(folder).encode()).hexdigest()[:24] + ".json")
    try:
        known = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        known = {}
    entries, fresh = [], {}
    for here, dirs, names in os.walk(folder, followlinks=True):  # links are checked to stay inside first
        dirs.sort()
        for name in dirs:
            check_link(folder, Path(here) / name, folder_link=True)
        for name in sorted(names):
            if _skipped(name):
                continue
            path = Path(here) / name
            check_link(folder, path)
            rel = path.relative_to(folder).as_posix()
            st = path.stat()
            stamp = [st.st_size, st.st_mtime_ns]
            cached = known.get(rel)
            sha = cached[2] if cached and cached[:2] == stamp else file_sha256(path)
            fresh[rel] = [*stamp, sha]
            entries.append(Entry(rel, st.st_size, sha, st.st_mode & filemodes.PERMISSIONS))
    if fresh != known:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fresh))
        os.replace(tmp, cache_file)
    return Manifest(tuple(entries))


def check_link(folder: Path, path: Path, folder_link: bool = False) -> None:
    """A symlink in a checkpoint folder is pushed as what it points to (a plain file or folder on the
    host), and only when that is inside the folder the user named: orch never ships a file from
    elsewhere. A folder link to one of its own parents would be walked forever."""
    if not path.is_symlink():
        return
    target = path.resolve()
    if not target.is_relative_to(folder):
        raise SpecError(f"{path}: a symlink to {target}, outside the checkpoint folder {folder}; copy the file "
                        f"into the folder or point the checkpoint's src at a folder holding it (nothing was pushed)")
    if folder_link and path.parent.resolve().is_relative_to(target):
        raise SpecError(f"{path}: a symlink to its own parent folder {target}; remove it (nothing was pushed)")


async def push(conn: Connection, folder: Path, dest: str, *, cache: Path | None = None,
               progress: Progress | None = None, files_at_once: int = FILES_AT_ONCE,
               modes_from: Path | None = None) -> PushResult:
    """Make `dest` on the host hold `folder`'s files with their modes (files only there are left
    alone). `modes_from`: the folder whose files' modes they get where it has the same path (a
    transformed copy's source: the user's chmod, not the cache's copy, says what a file's mode is)."""
    started = time.monotonic()
    manifest = await asyncio.to_thread(local_manifest, folder, cache)
    dest = _absolute(dest, conn.home)
    listing = await _listing(conn, dest)
    have, cached = await _host_hashes(conn, dest, manifest, listing)
    todo = [e for e in manifest.entries if have.get(e.path) != e.sha256]
    if todo or not listing:  # a file there means its folder is there
        folders = sorted({posixpath.dirname(f"{dest}/{e.path}") for e in todo} | {dest})
        made = await conn.run(shell.mkdir(*folders))
        if not made.ok:
            raise command_failed(made, f"{conn.host.name}: cannot create {dest}: {made.err.strip()}; "
                                       f"check the path and its owner")
    offsets = dict(zip([e.path for e in todo], await asyncio.gather(
        *(_resume_offset(conn, folder / e.path, f"{dest}/{e.path}", e) for e in todo))))
    if progress:
        progress("total", sum(e.size - offsets[e.path] for e in todo))
    gate = asyncio.Semaphore(files_at_once)

    async def one(entry: Entry) -> None:
        async with gate:
            await _send(conn, folder / entry.path, f"{dest}/{entry.path}", entry, offsets[entry.path], progress)

    try:
        await asyncio.gather(*(one(e) for e in todo))
    finally:
        if progress:
            progress("end", 0)
    modes = await asyncio.to_thread(_modes, manifest, modes_from)
    modes_set = await filemodes.ensure(conn, dest, modes, ("*" + PART_SUFFIX, HOST_MANIFEST))
    await _save_host_manifest(conn, dest, have, todo, listing, cached)
    resumed = sum(offsets.values())
    return PushResult(dest, manifest.digest, len(manifest.entries), manifest.total_bytes, len(todo),
                      sum(e.size for e in todo) - resumed, resumed, time.monotonic() - started, modes_set)


def _modes(manifest: Manifest, modes_from: Path | None) -> dict[str, int]:
    """relative path -> the mode its file gets on the host."""
    modes = {e.path: e.mode for e in manifest.entries}
    if modes_from is not None:
        for rel in modes:
            try:
                modes[rel] = (modes_from / rel).stat().st_mode & filemodes.PERMISSIONS
            except OSError:
                pass  # a file the transforms made: its own mode
    return modes


def _absolute(path: str, home: str) -> str:
    return home.rstrip("/") + path[1:] if path == "~" or path.startswith("~/") else path


def part_name(final: str, entry: Entry) -> str:
    """The temporary name: hidden, tied to the content it will hold, so only a matching part resumes."""
    folder, name = posixpath.split(final)
    return f"{folder}/.{name}.{entry.sha256[:16]}{PART_SUFFIX}"


async def _listing(conn: Connection, dest: str) -> dict[str, tuple[int, str]]:
    """relative path -> (size, mtime text) of every file under `dest` on the host."""
    done = await conn.run(shell.tree_listing(dest, ("*" + PART_SUFFIX, HOST_MANIFEST)))
    found = {}
    for record in done.stdout.split(b"\0"):
        if record:
            size, mtime, rel = record.decode(errors="surrogateescape").split(" ", 2)
            found[rel] = (int(size), mtime)
    return found


async def _host_hashes(conn: Connection, dest: str, manifest: Manifest,
                       listing: dict[str, tuple[int, str]]) -> tuple[dict[str, str], dict[str, list[object]]]:
    """Hashes of the host's files that could match (same size): from its cached manifest when the
    size and mtime still agree, else computed there; and that cached manifest."""
    try:
        cached = json.loads(await conn.read_file(f"{dest}/{HOST_MANIFEST}"))
    except (FileNotFoundError, ValueError):
        cached = {}
    hashes, unknown = {}, []
    for e in manifest.entries:
        if e.path not in listing or listing[e.path][0] != e.size:
            continue
        entry = cached.get(e.path)
        if entry and [entry[0], entry[1]] == [listing[e.path][0], listing[e.path][1]]:
            hashes[e.path] = entry[2]
        else:
            unknown.append(e.path)
    for i in range(0, len(unknown), HASH_BATCH):
        batch = unknown[i : i + HASH_BATCH]
        done = await conn.run(shell.sha256_each(dest, batch))
        for rel, sha in zip(batch, done.out.split()):
            if sha != "-":
                hashes[rel] = sha
    return hashes, cached


async def _resume_offset(conn: Connection, local: Path, final: str, entry: Entry) -> int:
    """How much of a part file left by an interrupted push can stay: its bytes must equal ours."""
    part = part_name(final, entry)
    stat = await conn.stat(part)
    if stat is None or stat.size == 0 or stat.size > entry.size:
        return 0
    done = await conn.run(shell.sha256_prefix(part, stat.size))
    theirs = done.out.split()[0] if done.ok and done.out.split() else ""
    ours = await asyncio.to_thread(file_sha256, local, stat.size)
    return stat.size if theirs == ours else 0


async def _send(conn: Connection, local: Path, final: str, entry: Entry, offset: int, progress: Progress | None) -> None:
    part = part_name(final, entry)
    await conn.put_file(local, part, offset, (lambda n: progress("advance", n)) if progress else None)
    moved = await conn.run(shell.move(part, final))
    if not moved.ok:
        raise command_failed(moved, f"{conn.host.name}: could not move {part} to {final}: {moved.err.strip()}")


async def _save_host_manifest(conn: Connection, dest: str, have: dict[str, str], sent: list[Entry],
                              before: dict[str, tuple[int, str]], cached: dict[str, list[object]]) -> None:
    """Record (size, mtime, sha256) of every file we now know, so the next push hashes nothing;
    an unchanged folder's record is left as it is (`before`: the listing from before the push)."""
    listing = await _listing(conn, dest) if sent else before
    known = {**have, **{e.path: e.sha256 for e in sent}}
    record = {rel: [listing[rel][0], listing[rel][1], sha] for rel, sha in known.items() if rel in listing}
    if record != cached:
        await conn.write_file(f"{dest}/{HOST_MANIFEST}", json.dumps(record, sort_keys=True).encode())
