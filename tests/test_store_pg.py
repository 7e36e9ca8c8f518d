"""The store on SQLite and on a real PostgreSQL server (tests/pg.py): the same writes and reads,
two controller processes writing at once, an older schema upgraded in place, and who made each run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from orchestrator.errors import StoreError
from orchestrator.store import schema
from orchestrator.store.database import (SUCCEEDED, MetricRow, Run, SeriesRow, Store, _driver_url,
                                         current_user)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path: Path) -> str:
    """A new, empty database: an SQLite file, or a database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'orch.db'}"
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    return request.getfixturevalue("postgres").database(name)


def run(uid: str, **fields) -> Run:
    return Run(uid=uid, experiment=fields.pop("experiment", "e"), variant="v", host="h", **fields)


def test_add_update_get_and_children_round_trip(url):
    store = Store(url)
    first = run("aaa-1", params={"steps": 3, "model": "m"}, flags=["x"], controller="box:12")
    store.add(first)
    assert first.id is not None
    store.add(MetricRow(run_id=first.id, name="accept_length", value=2.5, source="log"))
    store.add_children(SeriesRow, [{"run_id": first.id, "kind": "decode", "seq": i, "values": {"tok_s": i * 1.5}}
                                   for i in range(3)])
    store.save_log(first, b"line\n" * 100)
    store.update_run(first, status=SUCCEEDED, diagnosis={"signature": "s"})
    again = Store(url).get("aaa")
    assert (again.status, again.params, again.flags, again.diagnosis) == (SUCCEEDED, {"steps": 3, "model": "m"},
                                                                          ["x"], {"signature": "s"})
    record = Store(url).record(again)
    assert record["metrics"] == {"accept_length": 2.5}
    assert [r["tok_s"] for r in record["series"]] == [0.0, 1.5, 3.0]
    assert (record["user"], record["controller"]) == (current_user(), "box:12")
    assert Store(url).log(again) == b"line\n" * 100
    assert [m.name for m in Store(url).children(again, MetricRow)] == ["accept_length"]


def test_get_by_last_and_prefix_and_clear_errors(url):
    store = Store(url)
    store.add(run("abc-1"))
    store.add(run("abd-2"))
    assert (store.get("last").uid, store.get("last~1").uid, store.get("abd").uid) == ("abd-2", "abc-1", "abd-2")
    with pytest.raises(StoreError, match="ambiguous"):
        store.get("ab")
    with pytest.raises(StoreError, match="fewer runs"):
        store.get("last~5")
    assert [r.uid for r in store.runs(limit=1)] == ["abd-2"]


def test_succeeded_keys_latest_id_per_fingerprint(url):
    store = Store(url)
    store.add(run("r1", status=SUCCEEDED, plan_key="k", fingerprint="f"),
              run("r2", status=SUCCEEDED, plan_key="k", fingerprint="f"),
              run("r3", status="failed", plan_key="k", fingerprint="g"),
              run("r4", status=SUCCEEDED, experiment="other", plan_key="k", fingerprint="f"))
    assert store.succeeded_keys("e") == {"k": {"f": store.get("r2").id}}


def test_prepare_leaves_a_current_database_and_refuses_a_newer_one(url):
    Store(url).add(run("a"))
    Store(url)
    engine = create_engine(_driver_url(url))
    with engine.begin() as conn:
        assert conn.execute(text(f"SELECT max(version) FROM {schema.TABLE}")).scalar() == schema.VERSION
        conn.execute(text(f"INSERT INTO {schema.TABLE} (version) VALUES ({schema.VERSION + 1})"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer orch"):
        Store(url)


# The run table of an orch from before runs carried who made them, a key, a fingerprint or a diagnosis.
OLD_RUN = """CREATE TABLE run (id INTEGER NOT NULL PRIMARY KEY, uid VARCHAR NOT NULL, experiment VARCHAR NOT NULL,
variant VARCHAR NOT NULL, host VARCHAR NOT NULL, status VARCHAR NOT NULL, repeat INTEGER NOT NULL,
spec_path VARCHAR NOT NULL, spec JSON, params JSON, env JSON, command VARCHAR NOT NULL, flags JSON,
error VARCHAR, controller VARCHAR NOT NULL, started_at VARCHAR NOT NULL, ended_at VARCHAR)"""


def test_an_older_schema_gains_the_new_columns_and_indexes(url):
    engine = create_engine(_driver_url(url))
    with engine.begin() as conn:
        conn.execute(text(OLD_RUN))
        conn.execute(text("INSERT INTO run VALUES (1, 'old-1', 'e', 'v', 'h', 'succeeded', 0, '', '{}', '{}', '{}', "
                          "'cmd', '[]', NULL, 'c:1', '2026-01-01T00:00:00', NULL)"))
    store = Store(url)
    old = store.get("old-1")
    assert (old.status, old.command, old.username, old.plan_key) == ("succeeded", "cmd", None, None)
    store.update_run(old, diagnosis={"signature": "x"}, username="someone")
    assert [r.uid for r in store.runs(user="someone")] == ["old-1"]
    have = inspect(engine)
    assert {"username", "plan_key", "fingerprint", "diagnosis"} <= {c["name"] for c in have.get_columns("run")}
    assert {"ix_run_resume", "ix_run_username"} <= {i["name"] for i in have.get_indexes("run")}
    assert {"tagrow", "noterow"} <= set(have.get_table_names())  # schema 6's tables made beside the old ones
    assert "ix_tagrow_run_name" in {i["name"] for i in have.get_indexes("tagrow")}
    engine.dispose()


def test_an_upgrade_makes_each_runs_metrics_text_from_its_rows(url):
    """A database of schema 2 (no metrics text) gains each run's text, made from its metric rows
    (the first row of each name), as every write of metric rows makes it; a run without any: NULL."""
    store = Store(url)
    measured, bare = run("measured"), run("bare")
    store.add(measured, bare)
    store.add(MetricRow(run_id=measured.id, name="accept_length", value=2.5),
              MetricRow(run_id=measured.id, name="tok_s", value=float("-inf")),
              MetricRow(run_id=measured.id, name="accept_length", value=None, source="later"))
    engine = create_engine(_driver_url(url))
    with engine.begin() as conn:  # the database as an orch of schema 2 left it
        conn.execute(text("ALTER TABLE run DROP COLUMN metrics_json"))
        conn.execute(text(f"DELETE FROM {schema.TABLE}"))
        conn.execute(text(f"INSERT INTO {schema.TABLE} (version) VALUES (2)"))
    Store(url)
    with engine.connect() as conn:
        texts = dict(conn.execute(text("SELECT uid, metrics_json FROM run")).all())
        assert conn.execute(text(f"SELECT max(version) FROM {schema.TABLE}")).scalar() == schema.VERSION
    engine.dispose()
    assert texts == {"measured": '{"accept_length":2.5,"tok_s":-Infinity}', "bare": None}


CONTROLLER = """
import sys
from orchestrator.store.database import MetricRow, Run, Store
store = Store(sys.argv[1])
for i in range(6):
    run = Run(uid=f"{sys.argv[2]}-{i}", experiment="race", variant="v", host="h", controller=sys.argv[2])
    store.add(run)
    store.add(*(MetricRow(run_id=run.id, name=f"m{j}", value=j) for j in range(3)))
    store.add_children(MetricRow, [{"run_id": run.id, "name": f"bulk{j}", "value": j, "source": "", "note": ""}
                                   for j in range(3)])
"""


def test_two_controllers_writing_at_once_lose_nothing(postgres):
    """On PostgreSQL (SQLite's case: eight controllers on a fresh file in test_schema.py)."""
    url = postgres.database("two_controllers")
    procs = [subprocess.Popen([sys.executable, "-c", CONTROLLER, url, name], cwd=ROOT, stderr=subprocess.PIPE,
                              text=True) for name in ("one", "two")]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    store = Store(url)
    runs = store.runs(experiment="race")
    assert sorted(r.uid for r in runs) == sorted(f"{n}-{i}" for n in ("one", "two") for i in range(6))
    for r in runs:
        assert sorted(m.name for m in store.children(r, MetricRow)) == ["bulk0", "bulk1", "bulk2", "m0", "m1", "m2"]


def test_ls_mine_lists_only_this_users_runs(tmp_path):
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    Store(url).add(run("mine-1"), run("theirs-1", username="someone-else"))
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--db", url, "ls", "--mine", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [(r["uid"], r["user"]) for r in json.loads(done.stdout)] == [("mine-1", current_user())]


def test_a_missing_driver_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as where orch[postgres] is not installed
    with pytest.raises(StoreError, match=r"driver 'psycopg' is not installed; pip install 'orch\[postgres\]'"):
        Store("postgresql://nobody@127.0.0.1:1/none")
