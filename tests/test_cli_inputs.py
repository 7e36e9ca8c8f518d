"""Command-line values that cannot be right are one clear line and exit 2."""

from __future__ import annotations


from conftest import ROOT
from support.cli import orch


def test_an_unknown_status_is_an_error(tmp_path):
    done = orch(tmp_path, "ls", "--status", "bogus", timeout=60, inventory=False, columns=None)
    assert done.returncode == 2
    assert "--status 'bogus' is not a run status; use one of running, succeeded, failed, interrupted" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_out_of_range_is_an_error(tmp_path):
    done = orch(tmp_path, "--inventory", str(ROOT / "inventory.yaml"), "hosts", "check", "--port", "99999", timeout=60, inventory=False, columns=None)
    assert done.returncode == 2 and "--port" in done.stderr and "65535" in done.stderr
