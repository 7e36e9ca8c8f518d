"""The database schema: created safely by concurrent first users, versioned, upgraded in place
(with a copy kept), refused when a newer orch wrote it; a file that is not a database is a clear error."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from orchestrator.store import schema
from orchestrator.errors import StoreError
from orchestrator.store.database import Run, Store
from support.specs import OLD_RUN

WRITER = """
import sys
from orchestrator.store.database import Run, Store
store = Store(sys.argv[1])
store.add(Run(uid=sys.argv[2], experiment="race", variant="v", host="h"))
"""


def test_eight_controllers_on_a_fresh_file_lose_no_run(tmp_path):
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, f"run-{i}"], stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert sorted(r.uid for r in Store(url).runs()) == sorted(f"run-{i}" for i in range(8))


def test_an_older_database_is_upgraded_in_place_and_a_copy_kept(tmp_path, capsys):
    path = tmp_path / "orch.db"
    with sqlite3.connect(path) as db:
        db.execute(OLD_RUN)
        db.execute("INSERT INTO run VALUES (1, 'old-1', 'e', 'v', 'h', 'succeeded', 0, '', '{}', '{}', '{}', "
                   "'cmd', '[]', NULL, 'c', '2026-01-01T00:00:00', NULL)")
    store = Store(f"sqlite:///{path}")
    Store(f"sqlite:///{path}")  # upgraded already: nothing said
    said = capsys.readouterr().err.splitlines()
    assert said == [f"orch: upgrading database 'sqlite:///{path}' from schema 1 to {schema.VERSION} (once; a copy is "
                    f"kept at {path}.schema-1.bak)"]
    old = store.get("old-1")
    assert (old.status, old.command, old.diagnosis) == ("succeeded", "cmd", None)
    store.update_run(old, diagnosis={"signature": "x"})
    assert store.get("1").diagnosis == {"signature": "x"}
    with sqlite3.connect(path) as db:
        assert db.execute(f"SELECT max(version) FROM {schema.TABLE}").fetchone()[0] == schema.VERSION
    with sqlite3.connect(tmp_path / "orch.db.schema-1.bak") as copy:
        columns = [row[1] for row in copy.execute("PRAGMA table_info(run)")]
        assert "diagnosis" not in columns and copy.execute("SELECT uid FROM run").fetchall() == [("old-1",)]


def test_a_current_database_is_left_as_it_is(tmp_path):
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    Store(url).add(Run(uid="a", experiment="e", variant="v", host="h"))
    Store(url)
    assert not list(tmp_path.glob("*.bak"))
    assert [r.uid for r in Store(url).runs()] == ["a"]


def test_a_database_from_a_newer_orch_is_refused_unchanged(tmp_path):
    path = tmp_path / "orch.db"
    Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        db.execute(f"INSERT INTO {schema.TABLE} (version) VALUES ({schema.VERSION + 1})")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer orch"):
        Store(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    with pytest.raises(StoreError, match="notes.txt.*orch database"):
        Store(f"sqlite:///{path}")
    assert path.read_text() == "not a database\n" * 100
