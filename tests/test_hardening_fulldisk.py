"""A full disk on the host, on a real small tmpfs that holds the host's workdir and so the rehearsal
stand-in's package tree that the run patches: filled by the test while the server runs, the cleanup
still reverts every patch (the original is kept beside the file and renamed back: no new space
needed); where the revert truly cannot, orch exits non-zero naming the disk and the patch left
applied; a disk already full before a run is one line naming it and its free space, exit 3, and
nothing on the host changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port
from support.cli import orch, start_orch
from support.specs import debug_patch, small_experiment

PATCHED = "rehearsal/sglang/srt/models/llama_eagle3.py"  # under the workdir: on the small disk

PATCH = debug_patch("debug-hidden-states", 'print(f"[EAGLE3-DEBUG] shape={hidden_states.shape}", flush=True)')


@pytest.fixture
def disk(project: Path):
    """A 24 MiB tmpfs (root mounts it, as the suite runs) holding the inventory host's workdir."""
    mount = project / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace(str(project / "host"), str(mount / "host")))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int = 0) -> None:
    """Write a filler file until the disk is full (or has about `leave` bytes free)."""
    with open(mount / "filler", "wb", buffering=0) as out:
        try:
            while True:
                st = os.statvfs(mount)
                room = st.f_bavail * st.f_frsize - leave
                if room <= 0:
                    return
                out.write(b"\0" * min(room, 1 << 20))
        except OSError:  # ENOSPC: full
            pass


def experiment(project: Path, load: float = 0) -> Path:
    spec = project / "experiments" / "fulldisk.yaml"
    spec.write_text(small_experiment("fulldisk", free_port(), load, PATCH))
    return spec


def installed(project: Path, mount: Path) -> tuple[Path, bytes]:
    """The stand-in installed on the small disk (a dry run changes nothing else); the file the
    run patches and its original bytes."""
    done = orch(project, "run", str(experiment(project)), "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    target = mount / "host" / PATCHED
    return target, target.read_bytes()


def left_behind(mount: Path) -> list[str]:
    """Journal records and kept originals still on the disk."""
    host = mount / "host"
    return sorted(str(p.relative_to(host)) for p in [*host.glob("journal/*/*"), *host.rglob(".*.orch-original-*")])


def run_filling(project: Path, mount: Path, spec: Path, while_full=None) -> subprocess.CompletedProcess[str]:
    """`orch run` in the background; once its server is launched (the patch is applied by then),
    the disk is filled up and `while_full` called; the run's result."""
    proc = start_orch(project, "run", str(spec))
    try:
        deadline = time.monotonic() + 120
        while not list((mount / "host").glob("runs/*/pid")):
            assert proc.poll() is None and time.monotonic() < deadline, "the server was never launched"
            time.sleep(0.02)
        fill(mount)
        if while_full is not None:
            while_full()
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_a_disk_filled_during_the_run_still_gets_every_patch_reverted(project, disk):
    target, original = installed(project, disk)
    done = run_filling(project, disk, experiment(project, load=1.5))
    assert target.read_bytes() == original, done.stdout  # reverted on a full disk
    assert left_behind(disk) == [], done.stdout
    assert "cleanup failed" not in done.stdout, done.stdout
    # the disk stayed full to the end: only what the cleanup removed (journal, bytecode) is free
    assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize < 256 << 10


def test_a_revert_that_truly_cannot_exits_non_zero_naming_the_disk_and_the_patch(project, disk):
    target, original = installed(project, disk)

    def lose_the_kept_original() -> None:  # as if the disk had no hard links and no room for a copy
        for kept in target.parent.glob(f".{target.name}.orch-original-*"):
            kept.unlink()
        fill(disk)  # the room that freed goes too

    done = run_filling(project, disk, experiment(project, load=1.5), lose_the_kept_original)
    assert done.returncode != 0, done.stdout
    assert target.read_bytes() != original  # the patch is still there, and said so:
    said = " ".join(done.stdout.split())  # the terminal width wraps it: read it as one line
    assert f"on the disk {disk} (0 B free): patch 'debug-hidden-states' of run" in said, done.stdout
    assert f"is left applied to {target}" in said and "then `orch revert --host local`" in said, done.stdout
    (disk / "filler").unlink()
    reverted = orch(project, "revert", "--host", "local")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert target.read_bytes() == original
    assert left_behind(disk) == []


def test_a_disk_full_before_the_run_is_one_line_exit_3_and_nothing_changes(project, disk):
    target, original = installed(project, disk)
    fill(disk, leave=512 << 10)  # room for the lock, not for a run
    before = sorted(str(p) for p in (disk / "host").rglob("*"))
    done = orch(project, "run", str(experiment(project)))
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(orch(project, "show", "last", "--json").stdout)["error"]  # printed and recorded
    assert "\n" not in error and re.search(rf"the disk {re.escape(str(disk))} \(holding .*\) has [\d.]+ KiB free", error)
    assert "nothing was changed" in error, error
    assert sorted(str(p) for p in (disk / "host").rglob("*")) == before
    assert target.read_bytes() == original


def test_a_disk_with_no_room_for_the_lock_names_the_disk_too(project, disk):
    target, original = installed(project, disk)
    fill(disk)
    before = sorted(str(p) for p in (disk / "host").rglob("*"))
    done = orch(project, "run", str(experiment(project)))
    assert done.returncode == 3, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and "No space left on device" in said[0], done.stderr
    assert f"the disk {disk} (0 B free)" in said[0], done.stderr
    assert sorted(str(p) for p in (disk / "host").rglob("*")) == before
    assert target.read_bytes() == original
