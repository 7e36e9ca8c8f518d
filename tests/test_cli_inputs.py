"""Command-line values that cannot be right are one clear line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def orch(tmp_path, *args):
    env = {**os.environ, "ORCH_DB": f"sqlite:///{tmp_path / 'orch.db'}", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_an_unknown_status_is_an_error(tmp_path):
    done = orch(tmp_path, "ls", "--status", "bogus")
    assert done.returncode == 2
    assert "--status 'bogus' is not a run status; use one of running, succeeded, failed, interrupted" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_out_of_range_is_an_error(tmp_path):
    done = orch(tmp_path, "--inventory", str(ROOT / "inventory.yaml"), "hosts", "check", "--port", "99999")
    assert done.returncode == 2 and "--port" in done.stderr and "65535" in done.stderr
