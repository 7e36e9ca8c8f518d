"""The whole `eagle_debug` experiment over SSH: the real `orch run`, a real OpenSSH sshd on 127.0.0.1,
the rehearsal SGLang provisioned over SFTP and run as a real process there, a real SQLite file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sshd
from conftest import ROOT, free_port
from support.cli import orch, read_until, record, start_orch
from support.files import shipped, snapshot
from support.processes import server_gone

pytestmark = pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")


@pytest.fixture(autouse=True)
def _no_user_ssh(no_user_ssh) -> None:
    """Every test here runs with a throw-away HOME (see conftest.no_user_ssh)."""


@pytest.fixture
def box(sshd_box):
    return sshd_box


def ssh_project(project: Path, server: sshd.Sshd, known_line: str | None = None) -> Path:
    """The project's inventory with one SSH rehearsal host; returns the host's workdir."""
    known = project / "known_hosts"
    known.write_text(server.known_line() if known_line is None else known_line)
    workdir = project / f"{server.name}-work"
    (project / "inventory.yaml").write_text("hosts:\n" + server.rehearsal_entry(known, workdir))
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", project / "experiments" / "eagle_debug.yaml")
    return workdir


def hidden_width(rec: dict) -> int:
    (shape,) = {d["fields"]["shape"] for d in rec["debug_lines"]}
    return int(shape.rstrip("])").split(",")[-1])


def test_eagle_debug_over_ssh_gives_the_local_results_and_leaves_files_identical(project, box, tmp_path):
    workdir = ssh_project(project, box)
    done = orch(project, "run", "experiments/eagle_debug.yaml", "--hosts", "box", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installing the rehearsal sglang" in done.stdout
    runs = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["host"], r["status"]) for r in runs] == [("story", "box", "succeeded"),
                                                                      ("fixed", "box", "succeeded")]
    story, fixed = record(project, str(runs[0]["id"])), record(project, str(runs[1]["id"]))
    assert story["metrics"]["accept_len"] < 1.2 and "draft-rejected" in story["flags"]
    assert fixed["metrics"]["accept_len"] > 2.0 and fixed["flags"] == []
    assert (hidden_width(story), hidden_width(fixed)) == (64, 192)
    patches = story["patches"] + fixed["patches"]
    assert len(patches) == 5 and all(p["state"] == "reverted" for p in patches)
    assert all(p["file"].startswith(f"{workdir}/rehearsal/sglang/") for p in patches)
    # provisioned over SFTP, byte-identical to the shipped tree after both runs, journal empty
    assert snapshot(workdir / "rehearsal" / "sglang") == shipped(tmp_path)
    assert not list((workdir / "journal").rglob("*.json"))
    assert "[EAGLE3-DEBUG]" in orch(project, "logs", str(runs[0]["id"])).stdout


@pytest.mark.parametrize("trust", ["unknown", "changed"])
def test_untrusted_host_key_exits_3_and_changes_nothing(project, box, tmp_path, trust):
    if trust == "unknown":
        known_line = ""
    else:
        kind, blob = sshd.public(sshd.keygen(tmp_path / "impostor")).split()[:2]
        known_line = f"[{box.address}]:{box.port} {kind} {blob}\n"
    workdir = ssh_project(project, box, known_line)
    done = orch(project, "run", "experiments/eagle_debug.yaml", "--hosts", "box", "--set", f"port={free_port()}")
    assert done.returncode == 3, done.stdout + done.stderr
    expected = "unknown host key" if trust == "unknown" else "HOST KEY CHANGED"
    assert expected in done.stdout + done.stderr
    assert (project / "known_hosts").read_text() == known_line
    assert not workdir.exists()  # nothing provisioned, patched or launched
    assert json.loads(orch(project, "ls", "--json").stdout) == []


def test_dropped_connection_while_the_server_starts_reconnects_and_the_run_succeeds(project, box, tmp_path):
    """The per-connection sshd processes are killed while orch waits for readiness (sshd itself keeps
    listening): the server started with setsid keeps running, orch reconnects and finishes the run."""
    workdir = ssh_project(project, box)
    proc = start_orch(project, "run", "experiments/eagle_debug.yaml", "--hosts", "box", "--variant", "story",
                      "--set", f"port={free_port()}", "--set", "env.ORCH_REHEARSAL_LOAD_SECONDS=4")
    seen = read_until(proc, "waiting for it to be ready")
    assert box.drop_connections() > 0
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, seen + rest
    rec = record(project)
    assert rec["status"] == "succeeded" and rec["metrics"]["accept_len"] < 1.2
    assert [e["kind"] for e in rec["events"]].count("launched") == 1  # the same server, not a second one
    assert all(p["state"] == "reverted" for p in rec["patches"])
    assert snapshot(workdir / "rehearsal" / "sglang") == shipped(tmp_path)
    assert server_gone(workdir, rec["uid"])
