"""The controller SIGKILLed at every stage boundary, on the local host and on a real sshd host:
the next `orch run` or `orch revert` leaves every file byte-identical to the original and the
dead run ends `interrupted` with the reason. Also drift: a file edited by hand during a run.

How the controller is stopped at an exact point: the test starts the real `orch` command through
`support.crashing.controller_main`, which wraps the transports' `write_file` so that the process SIGKILLs
itself right after the Nth write of one kind of file returned (a saved original, a journal
record, a patched source file). Nothing in `orchestrator/` knows about it, so production code
carries no test hook, and the kill is a real SIGKILL at the real boundary: no `finally`, no
atexit, no flush runs. A kill during the workload comes from outside, like a user's `kill -9`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port, group_alive
from support.cli import orch, records, start_orch, wait_for
from support.files import installed, journal_files, modified_files
from support.specs import demo_spec

# -- helpers shared with test_lock.py ----------------------------------------------------------


def server_alive(project: Path, uid: str) -> bool:
    pid_file = project / "host" / "runs" / uid / "pid"
    if not pid_file.exists():
        return False
    return group_alive(int(pid_file.read_text()))


# -- the crash matrix -------------------------------------------------------------------------

# (variant, where the controller dies, the command that cleans up); story applies two patches,
# so its source writes are 1-2 applying and 3-4 reverting.
MATRIX = [
    ("story", ("backup", 1), "revert"),
    ("story", ("record", 1), "run"),
    ("story", ("source", 1), "revert"),         # after the rename: patched, pycache not yet dropped
    ("story", ("backup", 2), "run"),            # first file patched, second only backed up
    ("story", ("source", 2), "revert"),         # both patched, server not yet launched
    ("story", ("workload", 1), "run"),          # SIGKILL from outside while requests are in flight
    ("story", ("source", 3), "revert"),         # during revert: one file restored, its record kept
    ("story", ("source", 4), "run"),            # during revert: all restored, the last record not yet deleted
]
SSHD_MATRIX = [MATRIX[2], MATRIX[5], MATRIX[6]]
# `make test` runs one boundary (SIGKILL while requests are in flight) locally and one over sshd, to hold
# it under 15 minutes on 2 cores; `pytest -m slow` runs the whole matrix.
QUICK = {5}
CASES = [pytest.param("local", *m, id=f"local-{m[0]}-{m[1][0]}{m[1][1]}-{m[2]}",
                      marks=() if i in QUICK else pytest.mark.slow) for i, m in enumerate(MATRIX)] + [
    pytest.param("sshd", *m, id=f"sshd-{m[0]}-{m[1][0]}{m[1][1]}-{m[2]}",
                 marks=() if i == 0 else pytest.mark.slow) for i, m in enumerate(SSHD_MATRIX)]


@pytest.mark.parametrize("where,variant,crash,cleanup", CASES, indirect=["where"])
def test_sigkill_at_a_stage_boundary_then_next_command_restores_everything(project, where, variant, crash, cleanup):
    spec = demo_spec(project, requests=2000 if crash[0] == "workload" else 16)
    assert orch(project, "run", str(spec), "--dry-run", "--set", "port=1", tests_on_path=True).returncode == 0  # installs the rehearsal
    original = installed(project)

    args = ("run", str(spec), "--variant", variant, "--set", f"port={free_port()}")
    if crash[0] == "workload":
        proc = start_orch(project, *args, controller=True, tests_on_path=True)
        wait_for(proc, "sending")
        time.sleep(0.5)
        proc.kill()
    else:
        proc = start_orch(project, *args, crash=crash, controller=True, tests_on_path=True)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, output
    demo_spec(project, requests=16)  # the cleaning run need not be long
    [dead] = records(project)
    assert dead["status"] == "running"  # as the killed controller left it
    assert (project / "host" / "lock").exists()

    if cleanup == "run":
        done = orch(project, "run", str(spec), "--variant", "story", "--set", f"port={free_port()}", tests_on_path=True)
    else:
        done = orch(project, "revert", "--host", "local", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "warning: broke a stale lock" in text and "is gone" in text

    assert modified_files(project, original) == [], f"files left modified after {crash}: {modified_files(project, original)}"
    assert journal_files(project) == []
    assert not (project / "host" / "lock").exists()
    assert not server_alive(project, dead["uid"])
    after = records(project)
    dead = after[0]
    assert dead["status"] == "interrupted", dead
    assert f"controller {socket_name()}" in dead["error"] and "died before the run ended" in dead["error"]
    assert {"lock-broken", "recovered"} <= {e["kind"] for e in dead["events"]}
    assert all(p["state"] == "reverted" for p in dead["patches"])
    if cleanup == "run":  # the new run says what was cleaned up before it, and succeeded on clean files
        new = after[1]
        assert new["status"] == "succeeded", new["error"]
        notes = [e["message"] for e in new["events"] if e["kind"] == "recovered"]
        assert any("broke a stale lock" in n for n in notes) and any(dead["uid"] in n for n in notes), notes


def socket_name() -> str:
    import socket

    return socket.gethostname()


def test_kill_before_any_patch_marks_the_run_interrupted_without_patches(project):
    """A controller killed before it patched anything leaves no journal; the stale lock alone
    tells the next command that its run died."""
    spec = demo_spec(project)
    assert orch(project, "run", str(spec), "--dry-run", "--set", "port=1", tests_on_path=True).returncode == 0
    proc = start_orch(project, "run", str(spec), "--variant", "story", "--set", f"port={free_port()}",
                      crash=("backup", 1), controller=True, tests_on_path=True)
    proc.communicate(timeout=120)
    shutil.rmtree(project / "host" / "journal")  # as if it died just before its first backup
    done = orch(project, "revert", "--host", "local", tests_on_path=True)
    assert done.returncode == 0, done.stdout + done.stderr
    [dead] = records(project)
    assert dead["status"] == "interrupted" and "it left no patches applied" in dead["error"]
    assert "marked interrupted" in done.stdout


def test_a_reused_pid_in_a_dead_runs_pid_file_is_not_signalled(project):
    """After a host restart the pid a dead run recorded may belong to an unrelated process group:
    recovery checks the run mark in the group's environment and leaves a stranger alone."""
    spec = demo_spec(project, requests=2000)
    assert orch(project, "run", str(spec), "--dry-run", "--set", "port=1", tests_on_path=True).returncode == 0
    proc = start_orch(project, "run", str(spec), "--variant", "story", "--set", f"port={free_port()}", controller=True, tests_on_path=True)
    wait_for(proc, "sending")
    proc.kill()
    proc.communicate(timeout=60)
    [dead] = records(project)
    pid_file = project / "host" / "runs" / dead["uid"] / "pid"
    os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # the "restart": the real server is gone
    stranger = subprocess.Popen(["setsid", "sleep", "120"])  # a group leader the run did not start
    try:
        time.sleep(0.2)
        pid_file.write_text(f"{stranger.pid}\n")
        done = orch(project, "revert", "--host", "local", tests_on_path=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert stranger.poll() is None, "recovery signalled a process group the run did not start"
        assert f"pid {stranger.pid}" in done.stdout and "left it alone" in " ".join(done.stdout.split())
        assert records(project)[0]["status"] == "interrupted"
    finally:
        stranger.kill()
        stranger.wait()


# -- drift ------------------------------------------------------------------------------------


# the sshd case is kept out of `make test` (`pytest -m slow` runs it); the local one stays
@pytest.mark.parametrize("where", ["local", pytest.param("sshd", marks=pytest.mark.slow)], indirect=True)
def test_file_edited_by_hand_during_a_run_is_not_overwritten(project, where):
    spec = demo_spec(project, requests=64)
    assert orch(project, "run", str(spec), "--dry-run", "--set", "port=1", tests_on_path=True).returncode == 0  # installs the rehearsal
    original = installed(project)
    proc = start_orch(project, "run", str(spec), "--variant", "story", "--set", f"port={free_port()}", controller=True, tests_on_path=True)
    wait_for(proc, "server launched")
    target = project / "host" / "rehearsal" / "sglang" / "srt" / "models" / "llama_eagle3.py"
    edited = target.read_text() + "# edited by hand during the run\n"
    target.write_text(edited)
    output, _ = proc.communicate(timeout=120)
    text = " ".join(output.split())
    assert proc.returncode == 1, output  # a run that leaves a file changed fails
    record = json.loads(orch(project, "show", "last", "--json", tests_on_path=True).stdout)
    assert record["status"] == "failed" and "patch-drifted" in record["flags"]
    assert target.read_text() == edited  # the run's revert refused to overwrite it
    assert f"{target} changed during the run; left as it is" in text, output
    assert "orch revert --host local --force" in text

    listing = json.loads(orch(project, "patches", "--json", tests_on_path=True).stdout)
    assert [(p["host"], p["file"], p["state"]) for p in listing] == [("local", str(target), "drifted")]
    backup = listing[0]["backup"]
    again = orch(project, "revert", "--host", "local", tests_on_path=True)
    assert again.returncode == 1 and target.read_text() == edited
    message = " ".join(again.stdout.split())
    assert f"drifted: {target}" in message and backup in message and "`orch revert --host local --force`" in message

    forced = orch(project, "revert", "--host", "local", "--force", tests_on_path=True)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "+# edited by hand during the run" in forced.stdout and "[EAGLE3-DEBUG]" in forced.stdout  # the diff shown
    assert modified_files(project, original) == [] and journal_files(project) == []
    assert json.loads(orch(project, "patches", "--json", tests_on_path=True).stdout) == []
