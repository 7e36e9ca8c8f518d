"""What a session has read of a host's installed files, kept for its later runs until orch changes
files there.

A sweep's runs on one host read the same things before anything changes: the engine's sources (its
flag set, its version), the checkpoints' configs and headers, where each patched file lies. Each
read is a host command, and a run on a fresh server made dozens of them. `Reads` keeps their
answers for the session (one host, one command), and `ReadingConnection` is the connection that
answers reads from it: the stages that only read the host (the launch check, the preflight, the
compile check of the patched texts) work through it.

Nothing stale is ever read after a change orch makes: the journal empties it after every file a
patch or its revert changed (`Journal.on_change`), and so do a checkpoint push and the rehearsal
install. A read that was in flight while it was emptied is not kept (the generation moved on).
What changes on its own is never read through it: the run folders, the journal, the lock, GPUs and
ports are read on the session's own connection. A file changed by hand during a command is read
as the command first saw it, as it was before these reads were kept (the drift check, which reads
the patched files afresh, is what finds such a change).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.core.inventory import Host
from orchestrator.remote import Completed, Connection, FileStat, Reconnection

_MISSING = object()


class Reads:
    """The answers a session's reads got, by command or path; emptied by `clear`."""

    def __init__(self) -> None:
        self.generation = 0  # moves on at each clear: an answer read before it is not kept
        self.commands: dict[str, Completed] = {}
        self.files: dict[str, bytes | None] = {}  # None: the file does not exist
        self.stats: dict[str, FileStat | None] = {}
        self.resolved: dict[str, str] = {}  # a patch's `file:` -> the path it resolved to

    def clear(self) -> None:
        self.generation += 1
        self.commands.clear()
        self.files.clear()
        self.stats.clear()
        self.resolved.clear()

    def __len__(self) -> int:
        return len(self.commands) + len(self.files) + len(self.stats) + len(self.resolved)

    def keep(self, generation: int, table: dict[str, Any], key: str, value: Any) -> None:
        """Keep `value`, read while the generation was `generation`, unless something changed since."""
        if generation == self.generation:
            table[key] = value


class ReadingConnection:
    """The `Connection` protocol over `conn` with its reads (commands, by their input too; file
    reads; stats) answered from `reads` once read; a write goes through and empties them. Only
    what reads the host goes through it: a command run through it is run once per session."""

    def __init__(self, conn: Connection, reads: Reads):
        self.conn = conn
        self.reads = reads
        self.host: Host = conn.host
        self.home: str = conn.home

    @property
    def reconnections(self) -> Sequence[Reconnection]:
        return self.conn.reconnections

    async def run(self, command: str, *, timeout: float | None = None, input: bytes | None = None,
                  idempotent: bool = False) -> Completed:
        # a command that reads its input (the compile check of patched texts) answers per input
        key = command if input is None else f"{command}\0{hashlib.sha256(input).hexdigest()}"
        kept = self.reads.commands.get(key)
        if kept is not None:
            return kept
        generation = self.reads.generation
        done = await self.conn.run(command, timeout=timeout, input=input, idempotent=idempotent)
        self.reads.keep(generation, self.reads.commands, key, done)
        return done

    async def read_file(self, path: str) -> bytes:
        kept = self.reads.files.get(path, _MISSING)
        if kept is _MISSING:
            generation = self.reads.generation
            try:
                kept = await self.conn.read_file(path)
            except FileNotFoundError:
                kept = None
            self.reads.keep(generation, self.reads.files, path, kept)
        if kept is None:
            raise FileNotFoundError(path)
        assert isinstance(kept, bytes)
        return kept

    async def stat(self, path: str) -> FileStat | None:
        if path in self.reads.stats:
            return self.reads.stats[path]
        generation = self.reads.generation
        found = await self.conn.stat(path)
        self.reads.keep(generation, self.reads.stats, path, found)
        return found

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        try:
            await self.conn.write_file(path, data, mode)
        finally:
            self.reads.clear()

    async def put_tree(self, local_dir: Path, remote_dir: str) -> None:
        try:
            await self.conn.put_tree(local_dir, remote_dir)
        finally:
            self.reads.clear()

    async def put_file(self, local: Path, path: str, offset: int = 0,
                       advance: Callable[[int], None] | None = None) -> None:
        try:
            await self.conn.put_file(local, path, offset, advance)
        finally:
            self.reads.clear()

    async def forward(self, remote_port: int) -> tuple[str, int]:
        return await self.conn.forward(remote_port)

    async def close(self) -> None:
        await self.conn.close()
