"""Faults during real runs over SSH (root only): a fleet of sshd hosts in network namespaces, the
real `orch run`, the rehearsal SGLang started detached on each host.

A link is cut with `ip link set ... down` while the server starts or serves the workload; an sshd
is killed mid-run. Every run must end in a terminal state and no file may stay patched once the
host is reachable again. The hosts' files are on this machine's filesystem (namespaces split the
network only), so the tests check them directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import sshd
from conftest import ROOT
from support.cli import orch, read_until, record, start_orch
from support.files import untouched
from support.processes import server_gone

pytestmark = pytest.mark.skipif(sshd.netns_missing() is not None, reason=sshd.netns_missing() or "")

# orch's SSH client as the fault tests configure it (the ssh config users would write): a silent
# link is declared lost after ~3 s and a handshake gives up after 2 s, so faults show up quickly.
TERMINAL = {"succeeded", "failed", "interrupted"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    yield from sshd.fast_failing_fleet(tmp_path_factory.mktemp("faults"), 4)


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


def fleet_project(project: Path, fleet: sshd.Fleet, index: int, requests: int = 16) -> tuple[str, Path]:
    """The project's inventory with fleet host `index` (a rehearsal host); returns its name and workdir."""
    server = fleet.servers[index]
    workdir = project / f"{server.name}-work"
    (project / "inventory.yaml").write_text("hosts:\n" + server.rehearsal_entry(fleet.known_hosts(), workdir))
    spec = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("requests: 16", f"requests: {requests}")
    (project / "experiments" / "eagle_debug.yaml").write_text(spec)
    return server.name, workdir


def run_baseline(project: Path, name: str, *extra: str):
    return start_orch(project, "run", "experiments/eagle_debug.yaml", "--hosts", name, "--variant", "story",
                      "--set", "port=30000", *extra)


@pytest.mark.slow  # ~40 s: keeps `make test` under 15 min; `pytest -m slow` runs it
def test_link_cut_while_the_server_starts_reconnects_and_the_run_succeeds(project, fleet):
    name, workdir = fleet_project(project, fleet, 0)
    proc = run_baseline(project, name, "--set", "env.ORCH_REHEARSAL_LOAD_SECONDS=8")
    seen = read_until(proc, "waiting for it to be ready")
    fleet.cut(0)
    time.sleep(5)  # longer than keepalive allows (~3 s): the connection is declared lost
    fleet.restore(0)
    rest, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, seen + rest
    rec = record(project)
    assert rec["status"] == "succeeded" and rec["metrics"]["accept_len"] < 1.2
    assert [e["kind"] for e in rec["events"]].count("launched") == 1  # it kept running; not started twice
    assert "reconnected" in [e["kind"] for e in rec["events"]] and rec["error"] is None  # no workload was cut
    assert all(p["state"] == "reverted" for p in rec["patches"]) and untouched(workdir)
    assert server_gone(workdir, rec["uid"])


def test_link_cut_during_the_workload_then_restored_fails_cleanly_and_the_run_reverts(project, fleet):
    name, workdir = fleet_project(project, fleet, 1, requests=2000)
    proc = run_baseline(project, name)
    seen = read_until(proc, "sending")
    time.sleep(0.5)
    fleet.cut(1)
    time.sleep(6)  # the tunnel dies with the connection; the cleanup reconnects once the link is back
    fleet.restore(1)
    rest, _ = proc.communicate(timeout=180)
    rec = record(project)
    assert proc.returncode == 1 and rec["status"] == "failed", seen + rest
    assert "/generate failed" in rec["error"] and "cleanup failed" not in rec["error"]
    assert f"; the SSH link to {name} dropped during the workload (the connection to " in rec["error"]
    assert rec["error"].endswith("and was reopened: the requests in flight were cut") and "\n" not in rec["error"]
    reopened = [e["message"] for e in rec["events"] if e["kind"] == "reconnected"]
    assert len(reopened) == 1 and "the connection to" in reopened[0] and "dropped" in reopened[0]
    assert all(p["state"] == "reverted" for p in rec["patches"]) and untouched(workdir)  # by the run itself
    assert any(e["kind"] == "stopped" and "gone" in e["message"] for e in rec["events"])
    assert server_gone(workdir, rec["uid"])


@pytest.mark.slow  # ~40 s each: keeps `make test` under 15 min; `pytest -m slow` runs it
def test_link_that_stays_down_fails_the_run_and_a_later_revert_restores_every_file(project, fleet):
    name, workdir = fleet_project(project, fleet, 2, requests=2000)
    proc = run_baseline(project, name)
    seen = read_until(proc, "sending")
    time.sleep(0.5)
    fleet.cut(2)
    try:
        rest, _ = proc.communicate(timeout=180)
        rec = record(project)
        assert proc.returncode != 0 and rec["status"] == "failed", seen + rest
        assert "attempts to reconnect" in rec["error"] and f"orch revert --host {name}" in rec["error"]
        assert not untouched(workdir)  # unreachable: the patch is still there, and so is its journal record
        assert list((workdir / "journal").rglob("*.json"))
        assert not server_gone(workdir, rec["uid"])  # started detached, it outlived the connection
    finally:
        fleet.restore(2)
    reverted = orch(project, "revert", "--host", name)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert untouched(workdir) and not list((workdir / "journal").rglob("*.json"))
    assert server_gone(workdir, rec["uid"])
    after = record(project)
    assert after["status"] in TERMINAL and all(p["state"] == "reverted" for p in after["patches"])


@pytest.mark.slow  # ~40 s each: keeps `make test` under 15 min; `pytest -m slow` runs it
def test_sshd_killed_mid_run_fails_it_and_the_next_run_reverts_first(project, fleet):
    name, workdir = fleet_project(project, fleet, 3, requests=2000)
    server = fleet.servers[3]
    proc = run_baseline(project, name)
    seen = read_until(proc, "sending")
    time.sleep(0.5)
    server.kill()
    try:
        rest, _ = proc.communicate(timeout=180)
        first = record(project)
        assert proc.returncode != 0 and first["status"] == "failed", seen + rest
        assert "refused or reset" in first["error"] and not untouched(workdir)
    finally:
        server.relaunch()
    fleet_project(project, fleet, 3, requests=16)
    again = orch(project, "run", "experiments/eagle_debug.yaml", "--hosts", name, "--variant", "story",
                 "--set", "port=30000")
    assert again.returncode == 0, again.stdout + again.stderr
    out = again.stdout
    assert out.index("reverting 2 patch(es) left applied") < out.index("run 2 (")  # before the new run starts
    assert untouched(workdir) and server_gone(workdir, first["uid"])
    runs = json.loads(orch(project, "ls", "--json").stdout)
    assert [r["status"] for r in runs] == ["failed", "succeeded"]
    assert all(p["state"] == "reverted" for p in record(project, str(runs[0]["id"]))["patches"])
