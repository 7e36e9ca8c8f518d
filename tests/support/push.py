"""Checkpoint pushes from a test: folders of random bytes, their hashes, one push over a fresh
connection, and the transports a push is tried on (the `push_target` fixture in conftest.py)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import numpy as np

from orchestrator.core.inventory import Host
from orchestrator.host import push
from orchestrator.remote import connect

TRANSPORTS = ["local", "ssh-sftp", "ssh-commands"]  # ssh-commands: the reconnecting wrapper, chunks over exec channels


def make_folder(folder: Path, sizes: dict[str, int], seed: int = 0) -> None:
    """Files of random bytes (the same for the same seed) under `folder`: relative name -> size."""
    rng = np.random.default_rng(seed)
    for name, size in sizes.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` but hidden ones (partial files, manifests) with its sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def do_push(host: Host, reconnect: bool, src: Path, dest: Path, cache: Path, progress=None) -> push.PushResult:
    """`src` pushed to `dest` on `host` over a connection of its own."""
    async def go():
        conn = await connect(host, reconnect=reconnect)
        try:
            return await push.push(conn, src, str(dest), cache=cache, progress=progress)
        finally:
            await conn.close()
    return asyncio.run(go())
