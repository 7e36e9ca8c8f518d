"""Real SGLang sources for tests: published wheels installed with --no-deps into throw-away venvs.

Wheels are cached in ~/.cache/orch-test/wheels between runs; each venv is made once per test
session under a pytest temp folder. Nothing here imports sglang (its __init__ needs torch).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("ORCH_TEST_CACHE", Path.home() / ".cache" / "orch-test")) / "wheels"


def wheel(version: str) -> Path:
    """The cached wheel file of `sglang==version`, downloaded once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(CACHE)],
        capture_output=True, text=True, timeout=600,
    )
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if done.returncode != 0 or not found:
        pytest.skip(f"sglang=={version} wheel could not be downloaded: {done.stderr.strip()[-300:]}")
    return found[0]


def venv_with(version: str, folder: Path) -> Path:
    """A venv at `folder` with sglang==version installed without dependencies; returns its python."""
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel(version))],
            check=True, capture_output=True, timeout=600,
        )
    return python


def package_dir(python: Path) -> Path:
    """The installed sglang folder (found without importing it)."""
    code = "import importlib.util; print(importlib.util.find_spec('sglang').submodule_search_locations[0])"
    return Path(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip())


@pytest.fixture(scope="session")
def sglang_python(tmp_path_factory):
    """`sglang_python("0.5.23")` -> the python of a venv holding that version's real files."""
    made: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in made:
            made[version] = venv_with(version, tmp_path_factory.mktemp(f"sglang-{version}"))
        return made[version]

    return get
