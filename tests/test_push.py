"""Checkpoint push over the local transport and a real sshd: only changed files move, a killed push
resumes, and no file is ever visible under its final name before it is complete."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.host import push
from support.push import TRANSPORTS, do_push, hashes, make_folder

MiB = 2**20


def never_partial(dest: Path, sizes: dict[str, int]):
    """A progress callback asserting, at every chunk, that each file under its final name is whole."""
    seen = []

    def check(kind: str, amount: int) -> None:
        seen.append((kind, amount))
        for rel, size in sizes.items():
            final = dest / rel
            if final.exists():
                assert final.stat().st_size == size, f"{rel} visible half-written"
    return check, seen


@pytest.mark.parametrize("push_target", TRANSPORTS, indirect=True)
def test_only_changed_files_move(push_target, tmp_path: Path):
    host, reconnect = push_target
    src, dest, cache = tmp_path / "src", tmp_path / "host" / "ckpt", tmp_path / "cache"
    sizes = {"model-00001.safetensors": 3 * MiB, "model-00002.safetensors": 3 * MiB, "sub/config.json": 100}
    make_folder(src, sizes)
    check, seen = never_partial(dest, sizes)
    first = do_push(host, reconnect, src, dest, cache, check)
    assert (first.sent_files, first.sent_bytes, first.files) == (3, sum(sizes.values()), 3)
    assert seen[0] == ("total", sum(sizes.values())) and seen[-1] == ("end", 0)
    assert sum(n for k, n in seen if k == "advance") == first.sent_bytes
    assert hashes(dest) == hashes(src)
    assert not [p for p in dest.rglob("*.orch-part")]

    record = (dest / push.HOST_MANIFEST).stat()
    again = do_push(host, reconnect, src, dest, cache)
    assert (again.sent_files, again.sent_bytes) == (0, 0) and again.manifest == first.manifest
    unchanged = (dest / push.HOST_MANIFEST).stat()  # the record says the same: not written again
    assert (unchanged.st_ino, unchanged.st_mtime_ns) == (record.st_ino, record.st_mtime_ns)

    make_folder(src, {"model-00002.safetensors": 3 * MiB}, seed=7)  # one shard changes, same size
    changed = do_push(host, reconnect, src, dest, cache, never_partial(dest, sizes)[0])
    assert (changed.sent_files, changed.sent_bytes) == (1, 3 * MiB) and changed.manifest != first.manifest
    assert hashes(dest) == hashes(src)

    make_folder(dest, {"model-00001.safetensors": 3 * MiB}, seed=9)  # changed on the host: its mtime moves on
    repaired = do_push(host, reconnect, src, dest, cache)
    assert (repaired.sent_files, repaired.sent_bytes) == (1, 3 * MiB)
    assert hashes(dest) == hashes(src)
    cached = json.loads((dest / push.HOST_MANIFEST).read_text())
    assert {rel: entry[2] for rel, entry in cached.items()} == hashes(src)


KILLER = """
import asyncio, json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from orchestrator.host import push
from orchestrator.core.inventory import Host
from orchestrator.remote import connect

fields, src, dest, cache, kill_after, reconnect = json.loads(sys.argv[2])
moved = 0

def progress(kind, amount):
    global moved
    if kind == "advance":
        moved += amount
        if moved >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup of any kind: as a crash or a power cut

async def main():
    conn = await connect(Host(**fields), reconnect=reconnect)
    await push.push(conn, Path(src), dest, cache=Path(cache), progress=progress)

asyncio.run(main())
"""


@pytest.mark.parametrize("push_target", TRANSPORTS, indirect=True)
def test_a_killed_push_resumes_where_it_stopped(push_target, tmp_path: Path):
    host, reconnect = push_target
    src, dest, cache = tmp_path / "src", tmp_path / "host" / "ckpt", tmp_path / "cache"
    sizes = {"a.safetensors": 40 * MiB, "b.safetensors": 40 * MiB}
    make_folder(src, sizes)
    args = [dataclasses.asdict(host), str(src), str(dest), str(cache), 48 * MiB, reconnect]
    killed = subprocess.run([sys.executable, "-c", KILLER, str(ROOT), json.dumps(args)], capture_output=True, text=True,
                            timeout=120, env=os.environ)
    assert killed.returncode == -9, killed.stderr
    parts = list(dest.glob(".*.orch-part"))
    assert parts and sum(p.stat().st_size for p in parts) > 0
    for rel in sizes:  # whatever is under a final name is complete
        if (dest / rel).exists():
            assert hashes(dest)[rel] == hashes(src)[rel]

    resumed = do_push(host, reconnect, src, dest, cache, never_partial(dest, sizes)[0])
    assert resumed.resumed_bytes > 0
    assert resumed.sent_bytes <= sum(sizes.values()) - 40 * MiB  # 48 MiB had moved before the kill
    assert hashes(dest) == hashes(src)
    assert not list(dest.glob(".*.orch-part"))
