"""Two workdirs, one package tree: the inventory hosts `one` and `two` (this machine, `transport:
local`, each its own workdir) whose installed SGLang is one folder (`two`'s is a link to `one`'s), so
their runs patch the same installed SGLang files. A run of `two` while `one` has them patched
is refused in one line before anything in the tree changes, or with `--wait` waits for the tree's
lock; a tree lock whose owner died is broken with a warning; the files end as installed."""

from __future__ import annotations

import getpass
import json
import shutil
import socket
import subprocess
from pathlib import Path

from conftest import free_port
from support.cli import orch, records, start_orch, wait_for
from support.files import snapshot
from support.specs import debug_patch, rehearsal_experiment


def _shared(project: Path) -> tuple[Path, Path, Path]:
    """Hosts `one` and `two` sharing one installed package tree; (one's
    experiment, two's experiment, the shared package tree's real path)."""
    (project / "inventory.yaml").write_text("hosts:\n" + "".join(
        f"  {name}:\n    transport: local\n    workdir: {project / name}\n    gpus: 1\n    rehearsal: true\n"
        for name in ("one", "two")))
    for host in ("one", "two"):  # each workdir's stand-in installed, then two's package is one's
        installed = orch(project, "run", "--dry-run", str(_experiment(project, host, "first")))
        assert installed.returncode == 0, installed.stdout + installed.stderr
    shutil.rmtree(project / "two" / "rehearsal" / "sglang")
    (project / "two" / "rehearsal" / "sglang").symlink_to(project / "one" / "rehearsal" / "sglang")
    tree = (project / "one" / "rehearsal" / "sglang").resolve()
    assert tree.is_dir()
    return _experiment(project, "one", "holder", requests=800), _experiment(project, "two", "other"), tree


def _experiment(project: Path, host: str, name: str, requests: int = 8, patched: bool = True) -> Path:
    path = project / "experiments" / f"{name}.yaml"
    patch = debug_patch("debug-print", f'print("[TREE-DEBUG] {name}", flush=True)') if patched else ""
    path.write_text(rehearsal_experiment(name, hosts=[host], params={"port": free_port()},
                                         workload={"requests": requests, "max_new_tokens": 32},
                                         extra=patch + "ready_timeout: 60\n"))
    return path


def _lock(tree: Path) -> Path:
    return tree.parent / f".orch-patch-lock-{tree.name}"


def test_a_shared_tree_is_refused_in_one_line_or_waited_for(project):
    first, other, tree = _shared(project)
    pristine = snapshot(tree)
    holder = start_orch(project, "run", str(first))
    try:
        wait_for(holder, "sending")  # its run under its workload: its patch applied, the tree's lock held
        patched = snapshot(tree)
        assert patched != pristine
        held = json.loads(_lock(tree).read_text())
        assert held["user"] == getpass.getuser() and held["command"] == "run" and held["run"]

        refused = orch(project, "run", str(other))
        said = " ".join((refused.stdout + refused.stderr).split())
        assert refused.returncode == 3, said
        assert (f"two: package tree {tree} is being patched by another orch command: {_lock(tree)} is held by "
                f"{getpass.getuser()} (`orch run` on {socket.gethostname()} pid {holder.pid}, run {held['run']}, "
                f"since {held['started_at']}); nothing was changed; run `orch run --wait` to wait for it") in said, said
        assert snapshot(tree) == patched  # the refused run changed nothing in the tree
        assert not list((project / "two").glob("journal/*/*")), "the refused run journaled a patch"

        assert holder.poll() is None  # still running: the second run waits for it
        waited = orch(project, "run", str(other), "--wait")
        said = " ".join((waited.stdout + waited.stderr).split())
        assert waited.returncode == 0, said
        assert said.count(f"waiting for {_lock(tree)} (at most 3600 s): held by {getpass.getuser()}") == 1, said
        holder.communicate(timeout=240)
        assert holder.returncode == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    # both reverted to the files as installed: the waiting run read them only once the holder had
    # reverted (read before its wait, its saved original would be the holder's patched text)
    assert snapshot(tree) == pristine
    assert not _lock(tree).exists()
    runs = records(project)
    assert sorted((r["experiment"], r["status"]) for r in runs) == [
        ("holder", "succeeded"), ("other", "failed"), ("other", "succeeded")]


def test_a_tree_lock_whose_owner_died_is_broken_with_a_warning(project):
    _, other, tree = _shared(project)
    pristine = snapshot(tree)
    gone = subprocess.Popen(["true"])
    gone.wait()
    _lock(tree).write_text(json.dumps({
        "controller": socket.gethostname(), "pid": gone.pid, "pid_started": "", "token": "0123456789abcdef",
        "command": "run", "run": "20260101-000000-default-dead", "started_at": "2026-01-01T00:00:00",
        "lease_s": 3600.0, "user": "someone"}))
    done = orch(project, "run", str(other))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, said
    assert (f"warning: broke the stale patch lock {_lock(tree)} of package tree {tree} (its owner, pid {gone.pid} on "
            "this controller host, is gone; held by someone on controller") in said, said
    assert not _lock(tree).exists()
    assert snapshot(tree) == pristine


def test_a_run_without_patches_takes_no_tree_lock(project):
    _, _, tree = _shared(project)
    other = _experiment(project, "two", "other", patched=False)
    _lock(tree).write_text("not a lock orch wrote, and left alone\n")  # a run that patches would break it
    done = orch(project, "run", str(other))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _lock(tree).read_text() == "not a lock orch wrote, and left alone\n"
