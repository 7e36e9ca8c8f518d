"""Sweeps that do not slow down: what recovery does before each command's work on a host stays the
same however many sweeps ran there before (their run folders stay until `orch clean`), and it
still finds what a crashed run left among them.

The recovery step's host commands are counted on the real local transport, the scan of the run
folders is run under `bash -x` (one trace line per shell command) to count its reads of /proc."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import orchestrator
from conftest import free_port
from support.specs import experiment

from orchestrator.core import shell
from orchestrator.host import lifecycle
from orchestrator.remote.local import LocalConnection

OPS = ("run", "read_file", "write_file", "stat", "put_tree", "put_file")


def proc_reads(runs_dir: Path) -> tuple[list[str], int]:
    """The folders the recovery scan lists under `runs_dir`, and how many /proc stat files it read."""
    done = subprocess.run(["bash", "-xc", shell.live_run_folders(str(runs_dir))], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    # each /proc/PID/stat read is followed by the trace of `s=${s##*") "}` (the read's own trace goes
    # where its stderr does: /dev/null)
    return done.stdout.split(), sum(1 for line in done.stderr.splitlines() if line.lstrip("+").startswith(" s="))


@pytest.fixture
def counted(monkeypatch):
    """Host operations made inside `recover`, by kind, one Counter per recovery."""
    recoveries: list[Counter] = []
    current: list[Counter] = []
    for name in OPS:
        original = getattr(LocalConnection, name)

        async def op(self, *args, _original=original, _name=name, **kwargs):
            if current:
                current[-1][_name] += 1
            return await _original(self, *args, **kwargs)
        monkeypatch.setattr(LocalConnection, name, op)
    inner = lifecycle.recover

    async def recover(*args, **kwargs):
        current.append(Counter())
        try:
            return await inner(*args, **kwargs)
        finally:
            recoveries.append(current.pop())
    monkeypatch.setattr(lifecycle, "recover", recover)
    return recoveries


def test_the_third_sweeps_recovery_does_what_the_firsts_did(project, counted):
    spec = experiment(project, "repeats: 2\n", "requests: 2, max_new_tokens: 8, concurrency: 2")
    runs_dir = project / "host" / "runs"
    scans = []
    for sweep in range(3):
        scans.append(proc_reads(runs_dir))  # what the recovery of this sweep is about to scan
        outcomes = orchestrator.run_experiment(spec, inventory=project / "inventory.yaml",
                                               db=f"sqlite:///{project / f'sweep{sweep}.db'}", variants=["fixed"],
                                               overrides=[f"port={free_port()}"])
        assert [o.status for o in outcomes] == ["succeeded", "succeeded"], [o.error for o in outcomes]
    assert len(list(runs_dir.iterdir())) == 3  # each sweep's server folder (its two runs share it) is still there
    assert len(counted) == 3 and counted[2] == counted[0], counted
    assert scans[2] == scans[1] == scans[0] == ([], 0), scans  # ended servers' folders: no /proc read for them


def test_the_scan_lists_a_live_server_among_ended_ones_reading_proc_once(tmp_path):
    runs = tmp_path / "runs"
    server = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        for i in range(30):  # servers that ended: their wrapper recorded an exit code
            folder = runs / f"20260101-000000-fixed-{i:06x}"
            folder.mkdir(parents=True)
            (folder / "pid").write_text(f"{server.pid}\n")
            (folder / "exit_code").write_text("0\n")
        for name, pid in [("crashed", server.pid), ("dead", 2 ** 22 + 1), ("garbled", "12ab"), ("odd name", server.pid)]:
            (runs / name).mkdir()
            (runs / name / "pid").write_text(f"{pid}\n")
        listed, reads = proc_reads(runs)
        assert listed == ["crashed"]  # what a crashed controller left up; recovery stops it
        processes = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
        assert 0 < reads <= processes * 1.5 + 20, (reads, processes)  # one pass, not one per folder
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
