"""`mypy --strict` holds for the pure core, the transports, the engine seam, the shipped fake
Connection, the host side, the run's modules and the library face (the paths and the settings are pyproject.toml's [tool.mypy]; `make typecheck` runs the
same)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import ROOT

CHECKED = ["orchestrator/core", "orchestrator/remote", "orchestrator/engines/base.py", "orchestrator/testing.py",
           "orchestrator/__init__.py", "orchestrator/report", "orchestrator/host", "orchestrator/run"]


def _config() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _checked_files() -> list[Path]:
    return sorted(p for c in CHECKED for p in ([ROOT / c] if c.endswith(".py") else (ROOT / c).rglob("*.py")))


def test_the_configuration_is_strict_on_the_paths_it_should_be():
    config = _config()
    assert config["strict"] is True
    assert config["files"] == CHECKED


def test_mypy_strict_passes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    # every file of the checked paths was read (none left out by a wrong path or an exclude)
    assert f"no issues found in {len(_checked_files())} source file" in done.stdout, done.stdout


def test_no_type_ignore_in_the_checked_code():
    """An error is fixed, not silenced: a third-party module without types gets a per-module
    setting in pyproject.toml instead."""
    silenced = [f"{p.relative_to(ROOT)}:{n}" for p in _checked_files()
                for n, line in enumerate(p.read_text().splitlines(), 1) if "type: ignore" in line]
    assert not silenced, silenced
