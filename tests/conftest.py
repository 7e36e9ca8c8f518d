"""Shared fixtures: a throw-away experiment folder, inventory and database per test."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the repo's template, a local rehearsal inventory and its own database."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "sglang_launch.sh.j2").write_text((ROOT / "templates" / "sglang_launch.sh.j2").read_text())
    (tmp_path / "experiments").mkdir()
    (tmp_path / "inventory.yaml").write_text(
        "hosts:\n"
        "  local:\n"
        "    transport: local\n"
        f"    workdir: {tmp_path / 'host'}\n"
        "    gpus: 8\n"
        "    rehearsal: true\n"
    )
    return tmp_path


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ORCH_DB", "ORCH_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    os.environ.setdefault("COLUMNS", "200")


from wheels import sglang_python  # noqa: E402,F401  (fixture: real SGLang wheels in throw-away venvs)
