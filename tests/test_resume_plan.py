"""The resume key and fingerprint (plankey) and the store's resume query, on real specs and a real
SQLite file with fabricated runs."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from conftest import ROOT
from orchestrator.core import spec as specs
from orchestrator.run import plankey
from orchestrator.store.database import FAILED, INTERRUPTED, SUCCEEDED, Store



@pytest.fixture
def demo_spec(project: Path) -> specs.Spec:
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", project / "experiments" / "eagle_debug.yaml")
    return specs.load(project / "experiments" / "eagle_debug.yaml")


def plans_of(spec: specs.Spec, *overrides: str) -> dict[str, specs.RunPlan]:
    return {p.variant: p for p in plankey.fingerprinted(spec, specs.expand(spec, list(overrides)))}


def test_key_names_experiment_variant_matrix_point_and_repeat(demo_spec):
    spec = dataclasses.replace(demo_spec, matrix={"speculative_num_steps": (3, 5)}, repeats=2)
    keys = [p.key for p in specs.expand(spec)]
    assert len(set(keys)) == len(keys) == 8
    assert keys[0] == '["eagle_debug","story",{"speculative_num_steps":3},0]'
    assert [p.key for p in specs.expand(spec)] == keys  # stable across expansions


def test_fingerprint_is_the_same_for_another_port_and_changes_with_what_defines_the_run(demo_spec, tmp_path):
    base = plans_of(demo_spec, "port=30000")
    assert plans_of(demo_spec, "port=31999")["story"].fingerprint == base["story"].fingerprint
    assert base["story"].fingerprint != base["fixed"].fingerprint
    assert plans_of(demo_spec, "speculative_num_steps=5")["story"].fingerprint != base["story"].fingerprint
    assert plans_of(demo_spec, "env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=0")["story"].fingerprint != \
        base["story"].fingerprint
    patch = demo_spec.patches["kimi-aux-capture"]
    longer = dataclasses.replace(patch, text=patch.text + "#\n")
    edited = dataclasses.replace(demo_spec, patches={**demo_spec.patches, "kimi-aux-capture": longer})
    changed = plans_of(edited)
    assert changed["fixed"].fingerprint != base["fixed"].fingerprint
    assert changed["story"].fingerprint == base["story"].fingerprint  # story does not use that patch
    template = tmp_path / "other.sh.j2"
    template.write_text(demo_spec.template.read_text() + "\n# another line\n")
    assert plans_of(dataclasses.replace(demo_spec, template=template))["story"].fingerprint != base["story"].fingerprint
    workload = dataclasses.replace(demo_spec.workload, concurrency=8)
    assert plans_of(dataclasses.replace(demo_spec, workload=workload))["story"].fingerprint != base["story"].fingerprint


def test_fingerprint_masks_secret_values_and_ignores_judging_keys(demo_spec):
    with_token = lambda value: plans_of(demo_spec, f"env.HF_TOKEN={value}")["story"].fingerprint
    assert with_token("hf_aaaaaaaa") == with_token("hf_bbbbbbbb")
    variant = demo_spec.variants[1]
    relaxed = dataclasses.replace(variant, expect={"accept_len": ">= 1.0"}, allow=("algorithm-not-eagle3",))
    other = dataclasses.replace(demo_spec, variants=(demo_spec.variants[0], relaxed))
    assert plans_of(other)["fixed"].fingerprint == plans_of(demo_spec)["fixed"].fingerprint


def fabricate(store: Store, rows: list[dict]) -> None:
    columns = ["uid", "experiment", "variant", "host", "status", "repeat", "spec_path", "spec", "params", "env",
               "command", "flags", "controller", "started_at", "plan_key", "fingerprint"]
    base = {"host": "h", "repeat": 0, "spec_path": "", "spec": "{}", "params": "{}", "env": "{}", "command": "",
            "flags": "[]", "controller": "", "started_at": "2026-01-01T00:00:00"}
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO run ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [tuple({**base, "uid": f"u{i}", **row}[c] for c in columns) for i, row in enumerate(rows)])


def test_decide_skips_same_fingerprint_reruns_changed_and_new_ignores_other_statuses_experiments_and_keyless(
        demo_spec, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    story, fixed = plans_of(demo_spec).values()
    row = lambda plan, status, fp, experiment="eagle_debug": {
        "experiment": experiment, "variant": plan.variant, "status": status, "plan_key": plan.key, "fingerprint": fp}
    fabricate(store, [
        row(story, SUCCEEDED, story.fingerprint),   # 1: story done
        row(fixed, SUCCEEDED, "old"),               # 2: fixed done, before its patch changed
        row(fixed, FAILED, fixed.fingerprint),      # 3, 4, 5: do not count
        row(fixed, INTERRUPTED, fixed.fingerprint),
        row(fixed, SUCCEEDED, fixed.fingerprint, experiment="other"),
        {**row(fixed, SUCCEEDED, fixed.fingerprint), "plan_key": None, "fingerprint": None},  # 6: before keys
    ])
    lines = [d.line for d in plankey.decide([story, fixed], store.succeeded_keys("eagle_debug"))]
    assert lines == ["story (repeat 0): skipped, run 1 succeeded",
                     "fixed (repeat 0): fingerprint changed since run 2 (what changed is not known: run 2 was "
                     "recorded before runs kept their fingerprint's parts): runs again"]
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    [new] = plankey.decide([story], fresh.succeeded_keys("eagle_debug"))
    assert new.runs and new.line == "story (repeat 0): no succeeded run yet: runs"


def test_resume_query_reads_three_columns_of_succeeded_runs_only(demo_spec, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    plans = plankey.fingerprinted(demo_spec, specs.expand(dataclasses.replace(
        demo_spec, matrix={"speculative_num_steps": tuple(range(1000))})))
    fabricate(store, [{"experiment": "eagle_debug", "variant": p.variant, "status": (SUCCEEDED, FAILED)[i % 2],
                       "plan_key": p.key, "fingerprint": p.fingerprint, "spec": "{" + " " * 4000 + "}"}
                      for i, p in enumerate(plans)])
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    started = time.perf_counter()
    decisions = plankey.decide(plans, store.succeeded_keys("eagle_debug"))
    assert time.perf_counter() - started < 1.0
    assert sum(not d.runs for d in decisions) == 1000  # the succeeded half is skipped
    [query] = statements
    selected = query.split("FROM")[0]
    assert "plan_key" in selected and "fingerprint" in selected and "spec" not in selected and "params" not in selected
    with store.engine.connect() as conn:
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + query,
                                                                 ("eagle_debug", SUCCEEDED)))
    assert "COVERING INDEX ix_run_resume" in plan, plan


def test_a_database_from_before_keys_gets_the_columns_and_the_index(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX ix_run_resume")
        conn.execute("ALTER TABLE run DROP COLUMN plan_key")
        conn.execute("ALTER TABLE run DROP COLUMN fingerprint")
    store = Store(f"sqlite:///{path}")
    assert store.succeeded_keys("any") == {}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'ix_run_resume'").fetchone() == (1,)


def test_what_changed_names_each_part_with_params_old_and_new_and_no_secret(demo_spec, tmp_path):
    base = plans_of(demo_spec, "env.HF_TOKEN=hf_aaaaaaaaaaaa", "env.HF_HOME=/data/hf")
    stored = json.loads(json.dumps(base["fixed"].fingerprint_parts))  # as the run's event gives it back
    assert plankey.changes(stored, plans_of(demo_spec, "env.HF_TOKEN=hf_aaaaaaaaaaaa", "env.HF_HOME=/data/hf")[
        "fixed"].fingerprint_parts) == []
    steps = plans_of(demo_spec, "speculative_num_steps=5", "env.HF_TOKEN=hf_aaaaaaaaaaaa", "env.HF_HOME=/data/hf")
    assert plankey.changes(stored, steps["fixed"].fingerprint_parts) == ["speculative_num_steps=3→5"]
    env = plans_of(demo_spec, "env.HF_TOKEN=hf_bbbbbbbbbbbb", "env.HF_HOME=/scratch/hf")["fixed"].fingerprint_parts
    assert plankey.changes(stored, env) == ["env HF_HOME"]  # a secret's value is masked: no change to tell
    assert "hf_" not in json.dumps(base["fixed"].fingerprint_parts) and "/data/hf" not in str(plankey.changes(stored, env))
    patch = demo_spec.patches["kimi-aux-capture"]
    edited = dataclasses.replace(demo_spec, patches={**demo_spec.patches, "kimi-aux-capture": dataclasses.replace(
        patch, text=patch.text + "#\n")}, workload=dataclasses.replace(demo_spec.workload, concurrency=8))
    template = tmp_path / "other.sh.j2"
    template.write_text(demo_spec.template.read_text() + "\n# another line\n")
    changed = plans_of(dataclasses.replace(edited, template=template), "env.HF_TOKEN=hf_aaaaaaaaaaaa",
                       "env.HF_HOME=/data/hf")["fixed"].fingerprint_parts
    assert plankey.changes(stored, changed) == [
        "template", "patch kimi-aux-capture", f"workload concurrency={demo_spec.workload.concurrency}→8"]
    assert plankey.changes({**stored, "patches": {}}, stored) == [f"patch {name} added" for name in stored["patches"]]
    # a secret-named param is masked in the parts: its change is told by the names it may be, never its value
    keyed = [plans_of(demo_spec, f"api_key={key}")["fixed"] for key in ("sk-aaaa1111", "sk-bbbb2222")]
    assert "sk-" not in json.dumps([p.fingerprint_parts for p in keyed])
    [told] = plankey.decide([keyed[1]], {keyed[1].key: {keyed[0].fingerprint: 7}}, lambda run_id: keyed[0].fingerprint_parts)
    assert told.line == ("fixed (repeat 0): fingerprint changed since run 7 (no part it records differs: a secret's "
                         "value may have (api_key)): runs again")
