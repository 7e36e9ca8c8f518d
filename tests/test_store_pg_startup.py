"""`orch --help` starts light: it loads neither the database layer (SQLAlchemy, SQLModel, pydantic)
nor rich, nor asyncio; the modules the commands name at their top load on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
sys.argv = ["orch", "--help"]
import orchestrator.cli as cli
try:
    cli.main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
heavy = ("sqlalchemy", "sqlmodel", "pydantic", "rich", "asyncio", "orchestrator.store.database")
print("LOADED", *[name for name in heavy if name in sys.modules])
"""


def test_help_lists_the_commands_without_loading_the_heavy_modules():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ls " in done.stdout and "compare " in done.stdout and "show " in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED"
