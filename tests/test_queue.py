"""The shared queue through `orch run`: hosts take their runs from one queue, so a host that cannot
be reached leaves its plans to the others."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import sshd
from conftest import ROOT, free_port
from support.cli import orch, read_until, start_orch
from support.files import shipped, snapshot


def test_a_plan_an_unreachable_host_would_have_run_runs_on_another(project: Path):
    closed = free_port()  # nothing listens there: the connection is refused at once
    with (project / "inventory.yaml").open("a") as inventory:
        inventory.write("  gone:\n    transport: ssh\n    address: 127.0.0.1\n"
                        f"    port: {closed}\n    user: nobody\n    known_hosts: {project / 'known_hosts'}\n"
                        f"    workdir: {project / 'gone'}\n    gpus: 8\n    rehearsal: true\n")
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text())
    done = orch(project, "run", str(spec), "--hosts", "local,gone", "--set", f"port={free_port()}")
    # the host that left is said when it leaves, and the sweep exits 3 (README)
    assert done.returncode == 3, done.stdout + done.stderr
    said = done.stdout.index("gone left the sweep: ")
    # how many are still to run when its third refused connect gives up depends on how fast `local` takes them
    assert re.search(r"its [12] remaining plan\(s\) go to the other hosts", " ".join(done.stdout[said:].split()))
    assert said < done.stdout.index("┏")  # as it left, above the summary, not in it
    listing = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["host"], r["status"]) for r in listing] == [
        ("story", "local", "succeeded"), ("fixed", "local", "succeeded")]


@pytest.mark.slow
@pytest.mark.skipif(sshd.netns_missing() is not None, reason=sshd.netns_missing() or "")
def test_a_host_lost_mid_run_leaves_its_run_to_another_host_once(project: Path, no_user_ssh, tmp_path):
    """`local` and a real sshd host in its own network namespace (its own ports); its link is cut
    while its server starts: that run is retried on local, and the two runs name each other."""
    (tmp_path / "fleet").mkdir()
    fleet = sshd.Fleet(tmp_path / "fleet", 1)
    try:
        fleet.start()
        box = fleet.servers[0]
        box.client_options("ServerAliveInterval 1", "ServerAliveCountMax 2", "ConnectTimeout 3")
        workdir = tmp_path / "box-work"
        (project / "inventory.yaml").write_text((project / "inventory.yaml").read_text()
                                                + box.rehearsal_entry(fleet.known_hosts(), workdir))
        spec = project / "experiments" / "eagle_debug.yaml"
        spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text())
        proc = start_orch(project, "run", str(spec), "--hosts", f"local,{box.name}", "--set", f"port={free_port()}",
                          "--set", "env.ORCH_REHEARSAL_LOAD_SECONDS=3")
        seen, line = "", ""
        while not (f"@{box.name}" in line and "waiting for it to be ready" in line):
            line = proc.stdout.readline()
            assert line, seen
            seen += line
        fleet.cut(0)
        rest, _ = proc.communicate(timeout=300)
        assert proc.returncode == 3, seen + rest  # its plans ran, but a host left the sweep
        assert f"{box.name} left the sweep: the link failed for good during run" in rest
        listing = json.loads(orch(project, "ls", "--json").stdout)
        lost = [r for r in listing if r["host"] == box.name]
        assert len(lost) == 1 and lost[0]["status"] == "failed", listing
        retried = [r for r in listing if r["host"] == "local" and r["variant"] == lost[0]["variant"]]
        assert len(retried) == 1 and retried[0]["status"] == "succeeded", listing
        first = json.loads(orch(project, "show", str(lost[0]["id"]), "--json").stdout)
        retry = json.loads(orch(project, "show", str(retried[0]["id"]), "--json").stdout)
        assert any(e["kind"] == "retried" and f"run {retry['id']}" in e["message"] for e in first["events"])
        assert any(e["kind"] == "retry" and f"run {first['id']}" in e["message"] for e in retry["events"])
        # the link comes back: `orch revert` stops what the cut-short run left and restores its files
        fleet.restore(0)
        reverted = orch(project, "revert", "--host", box.name)
        assert reverted.returncode == 0, reverted.stdout + reverted.stderr
        assert snapshot(workdir / "rehearsal" / "sglang") == shipped(tmp_path)
    finally:
        fleet.stop()


def test_a_host_whose_lock_another_command_broke_leaves_the_sweep_when_its_run_ends(project: Path):
    """Another controller breaks and retakes `local`'s lock while its first run loads: that run
    ends, then the host takes no more plans (they would race that command), says so, and the sweep
    exits 3 with the plan it did not run on its own line."""
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text())
    proc = start_orch(project, "run", str(spec), "--set", f"port={free_port()}",
                      "--set", "env.ORCH_REHEARSAL_LOAD_SECONDS=20")
    seen = read_until(proc, "waiting for it to be ready")
    (project / "host" / "lock").write_text("another controller's lock\n")  # broken and retaken
    rest, _ = proc.communicate(timeout=300)
    out = seen + rest
    assert proc.returncode == 3, out
    said = out.index("local left the sweep: ")
    assert "lock was broken by another command during run" in out[said:]
    assert "its 1 remaining plan(s) are not run (no other host left can run them)" in out[said:]
    assert "\nerror: local: " in out[said:]  # the plan not run, below the summary
    listing = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["status"]) for r in listing] == [("story", "succeeded")]
