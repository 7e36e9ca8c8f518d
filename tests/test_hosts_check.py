"""`orch hosts check`: its round trip leaves out the host's own work, and a rehearsal host shows
the GPUs and the release it simulates."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from orchestrator.core.inventory import Host
from orchestrator.host import facts as hostfacts
from support.cli import loaded_by, orch

ROOT = Path(__file__).resolve().parent.parent
SLOW_START_S = 1.0


def _inventory(folder, body: str) -> None:
    (folder / "inventory.yaml").write_text("hosts:\n" + body)


def test_the_round_trip_leaves_out_the_hosts_python_start_up(tmp_path):
    slow = tmp_path / "slow-python"
    slow.write_text(f"#!/bin/sh\nsleep {SLOW_START_S}\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    _inventory(tmp_path, f"  box:\n    transport: local\n    workdir: {tmp_path}/w\n    python: {slow}\n")
    done = orch(tmp_path, "hosts", "check", "--json", timeout=60, db=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (found,) = json.loads(done.stdout)
    assert found["host_ms"] >= SLOW_START_S * 1000
    assert 0 < found["rtt_ms"] < SLOW_START_S * 1000 / 2, found  # the sleep is the host's, not the link's


def test_a_rehearsal_host_shows_its_simulated_gpus_and_release(tmp_path):
    _inventory(tmp_path, f"  r:\n    transport: local\n    workdir: {tmp_path}/w\n    gpus: 4\n    rehearsal: \"0.5.23\"\n")
    listed = orch(tmp_path, "hosts", "check", "--json", timeout=60, db=False)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (found,) = json.loads(listed.stdout)
    assert found["gpu_count"] == 4 and found["rehearsal"] == "0.5.23"
    shown = orch(tmp_path, "hosts", "check", timeout=60, db=False, columns="250")
    assert "4x simulated (rehearsal)" in shown.stdout and "rehearsal 0.5.23 (installed by the first run)" in shown.stdout
    assert not (tmp_path / "w").exists(), "hosts check wrote to the host"


def _parsed(lines: list[str], rtt_ms: float = 50.0) -> hostfacts.HostFacts:
    marker = hostfacts.shell.FACTS_MARKER
    text = "\n".join(f"{marker} {line}" for line in lines)
    return hostfacts.parse(Host(name="h", transport="local"), text, rtt_ms, 1)


def test_the_hosts_clock_is_read_with_a_decimal_comma_too():
    found = _parsed(["began=1700000000,100000", "ended=1700000000,130000"])
    assert found.host_ms == 30.0 and found.rtt_ms == 20.0


def test_without_the_hosts_clock_the_round_trip_is_the_whole_command():
    for lines in ([], ["began=", "ended="], ["began=5.0", "ended=4.0"]):
        found = _parsed(lines)
        assert found.host_ms is None and found.rtt_ms == 50.0


def test_hosts_check_loads_neither_pydantic_nor_the_database_layer(tmp_path):
    """Its start-up is part of every fan-out's wall time: a bounded `--port` checked by orch, not by
    typer's pydantic conversion; and hosts check records nothing."""
    _inventory(tmp_path, f"  box:\n    transport: local\n    workdir: {tmp_path}/w\n")
    env = {**os.environ, "ORCH_INVENTORY": str(tmp_path / "inventory.yaml"), "PYTHONPATH": str(ROOT)}
    _, loaded = loaded_by(["hosts", "check", "--json", "--port", "30001"], ("pydantic", "sqlalchemy", "sqlmodel"),
                          env, tmp_path)
    assert loaded == []
    bad = orch(tmp_path, "hosts", "check", "--port", "0", db=False)
    assert bad.returncode == 2 and "0 is not a TCP port; give one from 1 to 65535" in bad.stderr, bad.stderr
