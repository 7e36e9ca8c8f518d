"""The host lock on a full disk and after a crash mid-write: it is written whole before it is put in
place, so no empty lock is ever left behind, and an empty or unreadable lock (from a crash of an
older orch, or a hand edit) is stale at once instead of holding the host for a lease."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import HostBusy, HostError
from orchestrator.host.lock import HostLock, read
from orchestrator.remote.local import LocalConnection


def connection(workdir: Path) -> LocalConnection:
    return LocalConnection(Host("box", transport="local", workdir=str(workdir)))


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs (root mounts it, as the suite runs), and a function that fills it up."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")

    def fill() -> None:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
    try:
        yield disk, fill
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_lock_on_a_full_disk_is_a_host_error_and_leaves_no_file(small_disk):
    disk, fill = small_disk
    workdir = disk / "work"
    workdir.mkdir()
    fill()
    with pytest.raises(HostError) as caught:
        asyncio.run(HostLock(connection(workdir), str(workdir), "run").acquire())
    message = str(caught.value)
    assert "\n" not in message and "No space left on device" in message, message
    assert files(workdir) == []  # no empty lock, no temporary file


def test_a_renewal_on_a_full_disk_keeps_the_lease_and_leaves_no_temporary_file(small_disk):
    disk, fill = small_disk
    workdir = disk / "work"
    workdir.mkdir()
    lock = HostLock(connection(workdir), str(workdir), "run")

    async def go() -> None:
        await lock.acquire()
        before = (workdir / "lock").read_text()
        os.utime(workdir / "lock", (1, 1))  # an old renewal: this one must refresh it
        fill()
        assert await lock.renew("run-1")
        assert (workdir / "lock").read_text() == before  # the whole owner still, not a cut one
        assert (workdir / "lock").stat().st_mtime > 1
        assert files(workdir) == ["lock"]
        await lock.release()
        assert files(workdir) == []

    asyncio.run(go())


def test_a_lock_is_never_in_place_before_its_content_is_complete(tmp_path):
    """The take writes a temporary file, then links it into place: a write that fails (here a
    printf that writes nothing and fails, as on a full disk) leaves no lock at all."""
    failing = "printf() { echo 'printf: write error: No space left on device' >&2; return 1; }; "
    take = shell.lock_take(str(tmp_path / "lock"), '{"token": "t"}')
    done = subprocess.run(["bash", "-c", failing + take], capture_output=True, text=True)
    assert done.returncode != 0 and shell.LOCK_MARKER not in done.stdout
    assert files(tmp_path) == []


@pytest.mark.parametrize("content", ["", "\n", '{"controller": "box", "pid"', "\x00\x00garbage"],
                         ids=["empty", "newline", "cut-json", "garbage"])
def test_an_empty_or_unreadable_lock_is_broken_at_once(tmp_path, content):
    (tmp_path / "lock").write_text(content)  # fresh: its mtime is now
    lock = HostLock(connection(tmp_path), str(tmp_path), "run")

    async def go() -> None:
        broken = await lock.acquire()
        assert len(broken) == 1 and broken[0].owner is None
        assert "empty or unreadable" in broken[0].broken_because
        held = await read(lock.conn, str(tmp_path))
        assert held is not None and held.owner == lock.owner
        await lock.release()

    asyncio.run(go())
    assert files(tmp_path) == []


def test_a_live_owners_lock_still_holds_the_host(tmp_path):
    """Breaking unreadable locks at once must not break readable ones: a live owner keeps the host."""
    first = HostLock(connection(tmp_path), str(tmp_path), "run")
    second = HostLock(connection(tmp_path), str(tmp_path), "revert")

    async def go() -> None:
        await first.acquire()
        with pytest.raises(HostBusy):
            await second.acquire()
        assert json.loads((tmp_path / "lock").read_text())["token"] == first.owner.token
        await first.release()

    asyncio.run(go())
