"""`orch clean`: run folders of ended runs leave the host once their logs are in the database;
everything else stays (other databases' runs, live servers, recent runs, logs not stored whole)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import datetime, timedelta, UTC
from pathlib import Path

from support.cli import orch

from orchestrator.host import cleanup, server
from orchestrator.store.database import FAILED, RUNNING, SUCCEEDED, Run, Store


def test_clean_removes_an_ended_runs_folder_and_keeps_everything_else(project, demo):
    demo.write_text(demo.read_text().replace("requests: 16", "requests: 4"))
    done = orch(project, "run", str(demo), "--variant", "story")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = project / "host" / "runs"
    [ours] = [p for p in runs.iterdir()]
    stranger = runs / "20260101-000000-someone-else-abc123"  # a run of another database
    stranger.mkdir()
    (stranger / "server.log").write_text("theirs\n")
    store = Store(f"sqlite:///{project / 'orch.db'}")
    unstored = _fabricated(store, runs, "20260102-000000-no-log-def456", SUCCEEDED, log="kept here only\n")
    running = _fabricated(store, runs, "20260103-000000-running-0a1b2c", RUNNING, log="busy\n")

    recent = orch(project, "clean")
    assert recent.returncode == 0 and "no run folder to remove" in recent.stdout, recent.stdout + recent.stderr
    assert "1: ended too recently" in " ".join(recent.stdout.split())

    dry = orch(project, "clean", "--older-than", "0", "--dry-run")
    assert dry.returncode == 0 and "would remove 1 run folder(s)" in dry.stdout and ours.name in dry.stdout
    assert ours.exists()

    gone = orch(project, "clean", "--older-than", "0")
    text = " ".join(gone.stdout.split())
    assert gone.returncode == 0 and "removed 1 run folder(s)" in text, gone.stdout + gone.stderr
    for why in ("not a run of this database", "its log is not in the database", "its run has not ended"):
        assert why in text
    assert not ours.exists() and (stranger / "server.log").read_text() == "theirs\n"
    assert (unstored / "server.log").exists() and (running / "server.log").exists()
    record = json.loads(orch(project, "show", "1", "--json").stdout)
    assert any(e["kind"] == "cleaned" and ours.name in e["message"] for e in record["events"])
    assert "Decode batch" in orch(project, "logs", "1").stdout  # the log lives on in the database


def test_a_live_server_and_a_log_stored_cut_down_keep_their_folders_over_ssh(sshd_box, no_user_ssh, tmp_path):
    """Through a real sshd: the survey sees a live process group, and a log over the fetch limit."""
    from orchestrator.remote.ssh import SSHConnection

    known = tmp_path / "known_hosts"
    known.write_text(sshd_box.known_line())
    host = sshd_box.host(known, tmp_path / "work")
    runs = tmp_path / "work" / "runs"
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    done = _fabricated(store, runs, "20260104-000000-done-111111", SUCCEEDED, log="ok\n", host=host.name)
    big = _fabricated(store, runs, "20260105-000000-big-222222", FAILED, log="x" * 100, host=host.name)
    live = _fabricated(store, runs, "20260106-000000-live-333333", FAILED, log="still going\n", host=host.name)
    sleeper = subprocess.Popen(["setsid", "sleep", "60"])
    (live / "pid").write_text(f"{sleeper.pid}\n")
    limit = server.FETCH_LIMIT
    try:
        server.FETCH_LIMIT = 50  # the 100-byte log counts as one too big to have been stored whole

        async def go():
            conn = await SSHConnection.open(host)
            try:
                return await cleanup.clean(conn, store, host.name, str(runs), timedelta(0), False, False)
            finally:
                await conn.close()

        verdicts = {v.folder.uid: v.kept_because for v in asyncio.run(go())}
    finally:
        server.FETCH_LIMIT = limit
        sleeper.kill()
        sleeper.wait()
    assert verdicts == {done.name: None, big.name: "its log was too big to store whole (--big-logs removes these)",
                        live.name: "its server is still running"}
    assert not done.exists() and big.exists() and live.exists()


def test_decide_needs_every_condition():
    now = datetime(2026, 11, 29, tzinfo=UTC)
    run = Run(id=1, uid="u", experiment="e", variant="v", host="h", status=SUCCEEDED,
              ended_at=(now - timedelta(days=8)).isoformat())
    folder = cleanup.Folder("u", 10, 5, False)

    def why(**changes):
        f = cleanup.Folder(**{**folder.__dict__, **changes.pop("folder", {})})
        r = Run(**{**run.model_dump(), **changes})
        return cleanup.decide([f], {"u": r}, {1: 5}, "h", timedelta(days=7), False, now)[0].kept_because

    assert why() is None
    assert why(host="other") == "not a run of this database"
    assert why(ended_at=(now - timedelta(days=6)).isoformat()) == "ended too recently"
    assert why(folder={"alive": True}) == "its server is still running"
    assert why(folder={"log_bytes": None}) is None  # no log ever written: nothing to lose
    assert cleanup.decide([folder], {}, {}, "h", timedelta(0), False, now)[0].kept_because == "not a run of this database"


def _fabricated(store: Store, runs: Path, uid: str, status: str, *, log: str, host: str = "local") -> Path:
    """A run row (ended ten days ago unless running) and its folder with a log; stored in the
    database unless the run is running or its name says no-log."""
    ended = None if status == RUNNING else (datetime.now(UTC) - timedelta(days=10)).isoformat()
    run = Run(uid=uid, experiment="e", variant="v", host=host, status=status, ended_at=ended)
    store.add(run)
    folder = runs / uid
    folder.mkdir(parents=True)
    (folder / "server.log").write_text(log)
    if status != RUNNING and "no-log" not in uid:
        store.save_log(store.get(uid), log.encode())
    return folder
