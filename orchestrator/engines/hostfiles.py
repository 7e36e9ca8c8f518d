"""Files of a host as the preflight reads them: whole, by ranged reads, their size, the names in a
folder; paths under an `overlay` key are read from that local folder instead (for `orch check`,
before a checkpoint has been pushed). Engine-neutral: both engines' preflights read drafts so."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core import shell

if TYPE_CHECKING:
    from orchestrator.remote import Connection


class HostFiles:
    """Reads on the host; paths under an `overlay` key are read from that local folder instead
    (for `orch check` before a checkpoint has been pushed)."""

    def __init__(self, conn: Connection, overlay: dict[str, Path] | None = None):
        self.conn = conn
        self.overlay = overlay or {}

    def _local(self, path: str) -> Path | None:
        for prefix, folder in self.overlay.items():
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return folder / path[len(prefix):].lstrip("/")
        return None

    async def read(self, path: str) -> bytes:
        local = self._local(path)
        return local.read_bytes() if local is not None else await self.conn.read_file(path)

    async def read_range(self, path: str, offset: int, length: int) -> bytes:
        local = self._local(path)
        if local is not None:
            with open(local, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        return (await self.conn.run(shell.read_range(path, offset, length))).stdout

    async def size(self, path: str) -> int:
        local = self._local(path)
        if local is not None:
            return local.stat().st_size
        found = await self.conn.stat(path)
        if found is None:
            raise FileNotFoundError(path)
        return found.size

    async def exists(self, path: str) -> bool:
        local = self._local(path)
        return local.exists() if local is not None else await self.conn.stat(path) is not None

    async def names(self, folder: str, suffix: str) -> list[str]:
        local = self._local(folder)
        if local is not None:
            return sorted(p.name for p in local.glob(f"*{suffix}") if p.is_file())
        return sorted(n for n in (await self.conn.run(shell.list_named(folder, suffix))).out.splitlines() if n)
