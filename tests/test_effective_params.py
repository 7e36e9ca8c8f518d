"""What the engine ran, recorded next to what the command asked: after launch the engine's own print
of its arguments is the run's `effective_params` (`orch show --json`), and each value it changed is a
`param-adjusted` event with both values and the engine's own log line, warned once per sweep. SGLang
(0.4.10.post2 server_args.py:576, 0.5.9 server_args.py:2448, 0.5.23 arg_groups/speculative_hook.py:1259)
rewrites --speculative-num-draft-tokens to steps + 1 when topk is 1; every emulated release does.
The new column is schema 4: a database of schema 3 gains it in place (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from conftest import ROOT, free_port
from orchestrator.engines import command
from orchestrator.engines.sglang.engine import SglangEngine
from orchestrator.engines.vllm.engine import VllmEngine
from orchestrator.store import schema
from orchestrator.store.database import Run, Store, _driver_url
from support.cli import orch

ADJUSTED_LINE = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"


@pytest.fixture
def demo(project: Path) -> Path:
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("port: 30000", f"port: {free_port()}"))
    return spec


def release(project: Path, name: str) -> None:
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{name}"'))


@pytest.mark.parametrize("name", ["0.4.10", "0.5.9", "0.5.23"])
def test_draft_tokens_the_engine_rewrote_are_recorded_as_it_ran(project, demo, name):
    release(project, name)
    # llama: a target every release serves with EAGLE3 and needs no patch (0.4.10 has no Kimi-K2.5 class)
    demo.write_text(demo.read_text().replace("patches: [debug-hidden-states, kimi-embed-and-head, kimi-aux-capture]",
                                             "patches: [debug-hidden-states]"))
    done = orch(project, "run", str(demo), "--variant", "fixed", "--set", "speculative_num_draft_tokens=8",
                "--set", "model_path={{ host.rehearsal }}/checkpoints/llama-target")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["params"]["speculative_num_draft_tokens"] == 8  # what was asked stays what was asked
    assert record["effective_params"]["speculative_num_draft_tokens"] == 4  # what ran
    [event] = [e for e in record["events"] if e["kind"] == "param-adjusted"]
    assert "asked 8" in event["message"] and "ran 4" in event["message"] and ADJUSTED_LINE in event["message"]
    assert "param adjusted by the engine" in done.stdout + done.stderr
    [listed] = json.loads(orch(project, "ls", "--json").stdout)  # the listing carries what ran too
    assert listed["params"]["speculative_num_draft_tokens"] == 8
    assert listed["effective_params"]["speculative_num_draft_tokens"] == 4


def test_a_value_the_engine_kept_is_no_adjustment(project, demo):
    done = orch(project, "run", str(demo), "--variant", "fixed")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["effective_params"]["speculative_num_draft_tokens"] == 4
    assert record["effective_params"]["speculative_algorithm"] == "EAGLE3"
    assert not [e for e in record["events"] if e["kind"] == "param-adjusted"]


def test_compare_groups_two_asked_configurations_that_ran_as_one(project, demo):
    demo.write_text(demo.read_text() + "matrix:\n  speculative_num_draft_tokens: [4, 8]\n")
    done = orch(project, "run", str(demo), "--variant", "fixed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).count("param adjusted by the engine") == 1  # warned once per sweep
    compared = json.loads(orch(project, "compare", "eagle_debug", "--json").stdout)
    [row] = compared["rows"]
    assert row["params"]["speculative_num_draft_tokens"] == 4 and len(row["runs"]) == 2
    assert "speculative_num_draft_tokens=4 and speculative_num_draft_tokens=8 ran as one" in row["ran_as_one"]
    listed = json.loads(orch(project, "ls", "--json").stdout)
    assert [r["params"]["speculative_num_draft_tokens"] for r in listed] == [4, 8]  # what each asked, kept


# -- the comparison, pure -------------------------------------------------------------------------


def test_sglang_effective_args_read_both_forms_and_the_change_is_found_with_its_line():
    engine = SglangEngine()
    repr_form = engine.effective_args("ServerArgs(model_path='/m', speculative_num_draft_tokens=4, speculative_algorithm='EAGLE')")
    dict_form = engine.effective_args("{'model_path': '/m', 'speculative_num_draft_tokens': 4, 'speculative_algorithm': 'EAGLE'}")
    assert repr_form == dict_form == {"model_path": "/m", "speculative_num_draft_tokens": 4, "speculative_algorithm": "EAGLE"}
    log = f"[2026-01-01 00:00:00] {ADJUSTED_LINE}\n[2026-01-01 00:00:00] server_args=ServerArgs(...)\n"
    asked = {"model_path": "/m", "speculative_num_draft_tokens": "8", "speculative_algorithm": "NEXTN", "port": "1"}
    found = command.adjusted(asked, repr_form, log)
    assert [(a.dest, a.asked, a.effective) for a in found] == [("speculative_num_draft_tokens", "8", 4),
                                                               ("speculative_algorithm", "NEXTN", "EAGLE")]
    assert found[0].line is not None and ADJUSTED_LINE in found[0].line
    assert found[1].line is None and "says nothing" in found[1].message()
    assert engine.effective_args(None) is None


def test_vllm_effective_args_are_its_non_default_args_and_the_json_config_compares_by_key():
    engine = VllmEngine()
    found = engine.effective_args("{'model_tag': '/m', 'speculative_config': {'method': 'eagle3', 'num_speculative_tokens': 3}}")
    assert found["model"] == "/m"
    asked = {"model": "/m", "speculative_config": json.dumps({"method": "eagle3", "num_speculative_tokens": 3})}
    assert command.adjusted(asked, found, "") == []
    asked["speculative_config"] = json.dumps({"method": "eagle3", "num_speculative_tokens": 5})
    assert [a.dest for a in command.adjusted(asked, found, "")] == ["speculative_config"]


# -- schema 4 -------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'orch.db'}"
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    return request.getfixturevalue("postgres").database(name)


def test_a_schema_3_database_gains_the_column_in_place(url):
    store = Store(url)
    old = Run(uid="old", experiment="e", variant="v", host="h")
    store.add(old)
    engine = create_engine(_driver_url(url))
    with engine.begin() as conn:  # the database as an orch of schema 3 left it
        conn.execute(text("ALTER TABLE run DROP COLUMN effective_params"))
        conn.execute(text(f"DELETE FROM {schema.TABLE}"))
        conn.execute(text(f"INSERT INTO {schema.TABLE} (version) VALUES (3)"))
    store = Store(url)
    run = store.get("old")
    assert run.effective_params is None
    store.update_run(run, effective_params={"speculative_num_draft_tokens": 4})
    assert Store(url).get("old").effective_params == {"speculative_num_draft_tokens": 4}
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT max(version) FROM {schema.TABLE}")).scalar() == schema.VERSION >= 4
        assert "effective_params" in {c["name"] for c in inspect(conn).get_columns("run")}
    engine.dispose()


def test_diff_shows_the_effective_values_that_differ():
    from orchestrator.core import diff

    base = {"params": {}, "env": {}, "metrics": {}, "patches": [], "debug_lines": []}
    a = {**base, "effective_params": {"speculative_num_draft_tokens": 4, "tp_size": 1, "only_here": 1}}
    b = {**base, "effective_params": {"speculative_num_draft_tokens": 6, "tp_size": 1}}
    rows = [r for r in diff.compare(a, b) if r.section == "effective_params"]
    assert [(r.key, r.a, r.b) for r in rows] == [("speculative_num_draft_tokens", 4, 6)]
