"""The reading commands start light: `orch ls`, `show`, `diff` and `compare` read the database over
plain DB-API (store/reading.py) and load neither SQLAlchemy nor SQLModel (pydantic they still load:
typer 0.29 coerces every non-boolean option through a pydantic TypeAdapter); their --json and --csv
output loads no rich either."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_compare import make_run
from orchestrator.store.database import Store

ROOT = Path(__file__).resolve().parent.parent

# Runs each command line given, in order, in one process; after each, a line naming the heavy modules loaded
PROBE = """
import json, sys
import orchestrator.cli as cli
heavy = ("sqlalchemy", "sqlmodel", "rich", "orchestrator.store.database")
for args in json.loads(sys.argv[1]):
    sys.argv = ["orch", *args]
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code == 0, (args, exc.code)
    print("\\n@@LOADED", *[name for name in heavy if name in sys.modules])
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('startup') / 'orch.db'}"
    store = Store(url)
    for n, steps in enumerate((3, 3, 5)):
        make_run(store, n, steps=steps, accept=2.0 + n, tok_s=100.0)
    return url


MACHINE_READABLE = [("ls", "--json"), ("ls", "--csv"), ("show", "last", "--json"), ("diff", "--json"),
                    ("compare", "sweep", "--json")]


def test_reading_commands_load_no_database_layer_and_their_json_no_rich(db):
    """One process (each command in a fresh one would cost the suite seconds): the machine-readable
    outputs first, then `orch ls`'s table, which is the first to load rich."""
    commands = [["--db", db, *args] for args in (*MACHINE_READABLE, ("ls",))]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(commands)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    parts = re.split(r"\n@@LOADED(.*)\n", done.stdout)  # output, loaded, output, loaded, ..., ""
    outputs, loaded = parts[0::2], [names.strip() for names in parts[1::2]]
    assert loaded == [""] * len(MACHINE_READABLE) + ["rich"]
    for args, output in zip(MACHINE_READABLE, outputs):
        assert output.strip(), args
        if "--json" in args:
            json.loads(output)
    assert "sweep" in outputs[len(MACHINE_READABLE)] and "┃" in outputs[len(MACHINE_READABLE)]  # the table
