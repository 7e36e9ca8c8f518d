"""A server log of any size read in pieces of about PIECE bytes, each ending at a line's end, and its
compressed copy made piece by piece into a temporary file beside: `orch import` of a log of
gigabytes holds a few pieces in memory, never the whole log nor its compressed copy.

The copy is one zlib stream, as `importing.pack` makes of a whole log (zlib's fastest level: a log
this big), so the store reads it back the same way. zlib lets go of the interpreter: a piece is
compressed in a thread while the next one is parsed."""

from __future__ import annotations

import tempfile
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

PIECE = 16 << 20  # bytes read at a time (at least the head the engines search for startup failures)
LEVEL = 1  # zlib's fastest level: importing.pack's for a log this big


def of_file(path: Path, piece: int = 0) -> Iterator[bytes]:
    """The file's bytes in pieces of about `piece` bytes (PIECE), each but the last ending with a
    newline: `piece` bytes and the rest of the line they end in (one copy of each piece)."""
    piece = piece or PIECE
    with open(path, "rb") as f:
        while chunk := f.read(piece):
            if not chunk.endswith(b"\n"):
                chunk += f.readline()
            yield chunk


def of_bytes(data: bytes, piece: int = 0) -> Iterator[bytes]:
    """`of_file` of bytes already in memory (a log fetched from a host)."""
    piece, at = piece or PIECE, 0
    while at < len(data):
        end = data.rfind(b"\n", at, at + piece) + 1
        if end <= at:
            found = data.find(b"\n", at + piece)
            end = len(data) if found < 0 else found + 1
        yield data[at:end]
        at = end


class Packed:
    """The log's compressed copy, written as its pieces come."""

    def __init__(self) -> None:
        self.size = 0  # bytes of log given
        self.file: IO[bytes] = tempfile.TemporaryFile(prefix="orch-import-")
        self._zlib = zlib.compressobj(LEVEL)
        self._pool = ThreadPoolExecutor(1)
        self._pending: Future[None] | None = None

    def add(self, piece: bytes) -> None:
        """Compress the piece in the thread, once the one before is written."""
        self._wait()
        self.size += len(piece)
        self._pending = self._pool.submit(self._write, piece)

    def _write(self, piece: bytes) -> None:
        self.file.write(self._zlib.compress(piece))

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def finish(self) -> tuple[int, IO[bytes]]:
        """(the log's size, its compressed copy from its start)."""
        self._wait()
        self._pool.shutdown()
        self.file.write(self._zlib.flush())
        self.file.seek(0)
        return self.size, self.file

    def close(self) -> None:
        self._wait()
        self._pool.shutdown()
        self.file.close()
