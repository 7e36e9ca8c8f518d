"""The read path (store/reading.py: plain DB-API, no SQLAlchemy) gives what the store's SQLAlchemy
path gives, on SQLite and on a real PostgreSQL server (tests/pg.py): the same record of a run
(`orch show --json` byte for byte), the same run resolution and errors, the same listing and
comparison queries; a newer schema is refused as the store refuses it, an older one upgraded, and a
reading command creates no database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.store import database, metricjson, queries, reading, records, schema, tags
from orchestrator.store.database import (CheckpointRow, DebugRow, EventRow, FindingRow, HistogramRow, MetricRow,
                                         PatchRow, RequestRow, Run, SeriesRow, Store)
from support.specs import OLD_RUN


def fill(store: Store) -> None:
    """Three runs with every kind of child row; JSON values with nesting, nulls and text."""
    for n in range(3):
        run = Run(uid=f"2026-12-01-{n}ab", experiment="sweep" if n < 2 else "other", variant=f"v{n}", host="ab"[n % 2],
                  status="succeeded" if n != 1 else "failed", repeat=n, params={"steps": 3 + n, "name": "m", "x": None},
                  env={"A": "1"}, command="#!/bin/sh\necho 100%", flags=["slow"] if n else [],
                  diagnosis={"signature": "s", "lines": [1, 2]} if n == 1 else None, error="boom" if n == 1 else None,
                  controller="box:1", spec={"name": "sweep"}, server_run_id=1,
                  effective_params={"speculative_num_draft_tokens": 4, "cfg": {"m": None}} if n == 0 else None)
        store.add(run)
        store.add(MetricRow(run_id=run.id, name="accept_len", value=2.0 + n, source="meta_info"),
                  MetricRow(run_id=run.id, name="accept_len", value=None, source="decode_log", note="no lines"),
                  MetricRow(run_id=run.id, name="output_tok_s", value=100.5, source="orch"),
                  PatchRow(run_id=run.id, seq=2, name="second", target="engine:y.py", file="/y.py",
                           sha256_before="a" * 64, sha256_after="c" * 64, state="reverted"),
                  PatchRow(run_id=run.id, seq=1, name="first", target="engine:x.py", file="/x.py",
                           sha256_before="a" * 64, sha256_after="b" * 64, state="applied"),
                  HistogramRow(run_id=run.id, name="accepted", counts=[1, 0, 4], source="log"),
                  EventRow(run_id=run.id, kind="stage", message="started"),
                  CheckpointRow(run_id=run.id, name="draft", dest="/d", source_hash="s", transforms=["cast"],
                                result_hash="r", manifest_hash="m", files=2, total_bytes=10, seconds=0.5),
                  FindingRow(run_id=run.id, severity="warning", code="W1", what="w", why="y", fix="f", allowed=True),
                  RequestRow(run_id=run.id, seq=0, at_s=1.5, ttft_ms=None, e2e_ms=20.0, prompt_tokens=5,
                             completion_tokens=7, accept_len=2.5, itl_ms=[1.0, 2.5]))
        store.add_children(SeriesRow, [{"run_id": run.id, "kind": "decode", "seq": i, "time": f"12:0{i}",
                                        "values": {"accept_len": 1.5 + i} if i != 1 else {"tok_s": 9}}
                           for i in range(3)])
        store.add_children(DebugRow, [{"run_id": run.id, "seq": 0, "text": "[DEBUG] x=1", "fields": {"x": "1"}}])
        store.save_log(run, b"log line\n" * 10)
        if n != 1:  # tags and a note on two of the three
            tags.write_tags(store, run.id, {"gpu": f"h100 ü{n}", "baseline": ""}, [])
            tags.write_note(store, run.id, "draft\nfrom step 40k")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def url(request, tmp_path_factory) -> str:
    """One filled database per kind, read only by the tests of this module."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('reading') / 'orch.db'}"
    else:
        url = request.getfixturevalue("postgres").database("t_reading")
    fill(Store(url))
    return url


def dumps(data) -> str:
    return json.dumps(data, indent=2, default=str)  # `orch show --json`


def test_each_runs_record_is_byte_identical_to_the_stores(url):
    store, reader = Store(url), reading.open_url(url)
    for ref in ("last", "last~1", "last~2", "1", "2026-12-01-1", "2026-12-01-2a"):
        assert dumps(reading.record(reader, reading.get(reader, ref))) == dumps(store.record(store.get(ref))), ref
    run = store.get("last")
    assert reading.requests(reader, run.id) == [
        {"seq": r.seq, "at_s": r.at_s, "ttft_ms": r.ttft_ms, "e2e_ms": r.e2e_ms, "prompt_tokens": r.prompt_tokens,
         "completion_tokens": r.completion_tokens, "accept_len": r.accept_len, "itl_ms": r.itl_ms}
        for r in store.children(run, RequestRow)]
    assert reading.log(reader, run.id) == store.log(run) == b"log line\n" * 10


def test_run_resolution_fails_as_the_stores_does(url):
    store, reader = Store(url), reading.open_url(url)
    for ref in ("2026", "last~3", "nothing", "99", "2026-12-01-_"):  # `_` matches any one character, as before
        with pytest.raises(StoreError) as theirs:
            store.get(ref)
        with pytest.raises(StoreError) as ours:
            reading.get(reader, ref)
        assert str(ours.value) == str(theirs.value)


def test_listing_and_comparison_queries_match_the_stores_rows(url):
    store, reader = Store(url), reading.open_url(url)
    whole = {r.id: r for r in store.runs()}
    for filters in ({}, {"experiment": "sweep"}, {"host": "a", "limit": 1}, {"status": "failed"}, {"user": "nobody"}):
        listed = queries.listed_runs(reader, **filters)
        expected = store.runs(**{k: v for k, v in filters.items() if k != "host"})
        expected = [r for r in expected if r.host == filters.get("host", r.host)]
        assert [r.id for r in listed] == [r.id for r in expected], filters
        for r in listed:
            assert r._asdict() == {k: getattr(whole[r.id], k) for k in queries.LISTED}
    ids = sorted(whole)
    assert queries.run_metrics(reader, ids) == {i: store.record(whole[i])["metrics"] for i in ids}
    assert queries.run_patches(reader, ids)[1] == [("first", "b" * 64), ("second", "c" * 64)]
    assert [r["id"] for r in queries.comparable_runs(reader, "sweep")] == [1]
    assert queries.status_counts(reader, "sweep") == {"succeeded": 1, "failed": 1}
    assert (queries.experiments(reader), queries.hosts(reader)) == (["other", "sweep"], ["a", "b"])
    assert queries.metric_names(reader) == ["accept_len", "output_tok_s"]
    # a Store serves as the source too, through its own pool
    assert queries.comparable_runs(store, "sweep") == queries.comparable_runs(reader, "sweep")


def test_report_records_match_each_runs_record(url):
    reader = reading.open_url(url)
    for bulk in records.experiment_records(reader, "sweep", series_value="accept_len"):
        whole = reading.record(reader, reading.get(reader, str(bulk["id"])))
        assert {k: whole[k] for k in ("params", "flags", "metrics", "debug_lines")} == \
               {k: bulk[k] for k in ("params", "flags", "metrics", "debug_lines")}
        assert bulk["patches"] == sorted(whole["patches"], key=lambda p: p["name"])  # in the order applied (seq)
        assert bulk["series"] == [{"kind": "decode", "time": s["time"], "accept_len": s["accept_len"]}
                                  for s in whole["series"] if "accept_len" in s]


def test_the_read_path_knows_the_stores_versions():
    assert (reading.VERSION, reading.SCHEMA_TABLE) == (schema.VERSION, schema.TABLE)
    assert reading.STATUSES == database.STATUSES


def test_a_missing_file_reads_as_empty_and_is_not_created(tmp_path):
    path = tmp_path / "orch.db"
    reader = reading.open_url(f"sqlite:///{path}")
    assert queries.listed_runs(reader) == [] and queries.status_counts(reader, "e") == {}
    with pytest.raises(StoreError, match="fewer runs"):
        reading.get(reader, "last")
    assert not path.exists()
    with pytest.raises(StoreError, match="unable to open database file"):
        reading.open_url(f"sqlite:///{tmp_path / 'no' / 'orch.db'}")


def test_a_newer_schema_is_refused_with_the_stores_line_and_an_older_one_upgraded(tmp_path):
    newer = tmp_path / "newer.db"
    Store(f"sqlite:///{newer}")
    with sqlite3.connect(newer) as db:
        db.execute(f"INSERT INTO {schema.TABLE} (version) VALUES ({schema.VERSION + 1})")
    with pytest.raises(StoreError) as theirs:
        Store(f"sqlite:///{newer}")
    with pytest.raises(StoreError) as ours:
        reading.open_url(f"sqlite:///{newer}")
    assert str(ours.value) == str(theirs.value)
    older = tmp_path / "older.db"
    with sqlite3.connect(older) as db:
        db.execute(OLD_RUN)
        db.execute("INSERT INTO run VALUES (1, 'old-1', 'e', 'v', 'h', 'succeeded', 0, '', '{}', '{}', '{}', "
                   "'cmd', '[]', NULL, 'c', '2026-01-01T00:00:00', NULL)")
    reader = reading.open_url(f"sqlite:///{older}")
    assert reading.record(reader, reading.get(reader, "old-1"))["diagnosis"] is None
    assert Path(f"{older}.schema-1.bak").exists()


def test_a_file_that_is_not_a_database_is_the_stores_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    with pytest.raises(StoreError) as theirs:
        Store(f"sqlite:///{path}")
    with pytest.raises(StoreError) as ours:
        reading.open_url(f"sqlite:///{path}")
    assert str(ours.value) == str(theirs.value)


def test_many_runs_metrics_are_read_in_one_pass_as_run_by_run(url, monkeypatch):
    """From SCAN_AT runs on, one pass over every metric row in the order written: the same first
    row of each name per run as the query by run, and only the runs asked for."""
    reader = reading.open_url(url)
    ids = [r.id for r in Store(url).runs()]
    by_run = {n: queries.run_metrics(reader, chosen) for n, chosen in (("all", ids), ("some", ids[1:]))}
    assert by_run["all"][ids[0]] == {"accept_len": 2.0, "output_tok_s": 100.5}  # not the later null of the name
    monkeypatch.setattr(queries, "SCAN_AT", 1)
    assert queries.run_metrics(reader, ids) == by_run["all"]
    assert queries.run_metrics(reader, ids[1:]) == by_run["some"] and ids[0] not in by_run["some"]


def test_ls_json_writes_params_as_stored_or_decoded_alike(url):
    from orchestrator.api import listing

    store, reader = Store(url), reading.open_url(url)
    metrics = queries.run_metrics(reader, [r.id for r in store.runs()])
    expected = [{"id": r.id, "uid": r.uid, "experiment": r.experiment, "variant": r.variant, "host": r.host,
                 "status": r.status, "user": r.username, "flags": r.flags, "started_at": r.started_at,
                 "ended_at": r.ended_at, "params": r.params, "effective_params": r.effective_params,
                 "metrics": metrics[r.id], "tags": {}} for r in store.runs()]
    assert expected[0]["effective_params"] == {"speculative_num_draft_tokens": 4, "cfg": {"m": None}}
    for decode in (True, False):
        text = listing.json_text(queries.listed_runs(reader, decode=decode), metrics)
        assert json.loads(text) == expected and len(text.splitlines()) == len(expected) + 2  # a run a line
        assert [list(run) for run in json.loads(text)] == [list(run) for run in expected]  # keys in this order


def test_ls_json_lines_are_the_encoders_text_of_any_value():
    """`orch ls --json` writes each line field by field: byte for byte what the JSON encoder writes,
    also for NaN, infinities, nulls, non-ASCII text and nested params."""
    from orchestrator.api import listing

    compact = json.JSONEncoder(default=str, separators=(",", ":")).encode
    run = queries.Listed(7, "ü-7", "e\"x", "v", "h", "failed", None, ["slow", "ü"], {"p": 1.5, "q": [1, None]},
                         "2026-12-01T00:00:00", None, {"k": 1.5, "ü": [None]})
    metrics = {"a": float("nan"), "b": float("inf"), "c": -float("inf"), "ü": 0.1 + 0.2, "d": None, "e": 3, "f": 1e22,
               "g": -0.0}
    whole = {"id": 7, "uid": "ü-7", "experiment": "e\"x", "variant": "v", "host": "h", "status": "failed", "user": None,
             "flags": ["slow", "ü"], "started_at": "2026-12-01T00:00:00", "ended_at": None,
             "params": {"p": 1.5, "q": [1, None]}, "effective_params": {"k": 1.5, "ü": [None]}, "metrics": metrics,
             "tags": {}}
    assert listing.json_text([run], {7: metrics}) == "[\n" + compact(whole) + "\n]\n"
    assert listing.json_text([run], {}) == "[\n" + compact({**whole, "metrics": {}}) + "\n]\n"
    tags = {"gpu": "ü\x1b[31m\"x\\", "empty": ""}  # values as given: escapes, quotes, a backslash
    assert listing.json_text([run], {7: metrics}, {7: tags}) == "[\n" + compact({**whole, "tags": tags}) + "\n]\n"


def test_ls_json_of_identities_sqlite_makes_is_byte_identical(url, tmp_path):
    """`orch ls --json` without --where and --sort takes each run's line from SQLite (its identity
    by json_object, the stored metrics text) and, on PostgreSQL, its stored metrics text: the same
    bytes as written field by field here from the metric rows, also for text SQLite would write
    otherwise (UTF-8, a backslash) and for NaN, infinities and nulls."""
    from orchestrator.api import listing

    def both(at: str, **filters):
        reader = reading.open_url(at)
        chosen = {"experiment": None, "status": None, "host": None, "user": None, **filters}
        rows = queries.listed_runs(reader, decode=False, limit=50, **chosen)
        ids = [r.id for r in rows]
        return listing.json_listing(reader, chosen, 50), listing.json_text(rows, queries.run_metrics(reader, ids),
                                                                           tags.run_tags(reader, ids))

    made, written = both(url)
    assert made == written
    if not url.startswith("sqlite"):
        return
    assert both(url, experiment="sweep", status="failed")[0] == both(url, experiment="sweep", status="failed")[1]
    odd = f"sqlite:///{tmp_path / 'odd.db'}"
    store = Store(odd)
    odd_run = Run(uid="ü\\1", experiment="e", variant="v\"q", host="h", status="succeeded", repeat=0, params={"ü": 1},
                  env={}, command="", flags=["ü"], controller="c", username="zoë", spec={})
    store.add(odd_run)
    store.add(*(MetricRow(run_id=odd_run.id, name=name, value=value) for name, value in ODD_METRICS.items()))
    tags.write_tags(store, odd_run.id, {"gpu": "ü\x1b\"\\", "b": ""}, [])
    made, written = both(odd)
    assert made == written and "\\u00fc" in made
    assert both(f"sqlite:///{tmp_path / 'none.db'}") == ("[]\n", "[]\n")


ODD_METRICS = {"nan": float("nan"), "inf": float("inf"), "-inf": -float("inf"), "ü": 0.1 + 0.2, "none": None, "int": 3,
               "big": 1e22, "tiny": 5e-324, "neg0": -0.0}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_each_runs_stored_metrics_text_is_the_one_its_rows_make(kind, tmp_path, request):
    """Every write of metric rows (one by one, in bulk, a later row of a name) leaves the run's
    stored metrics text (what `orch ls --json` writes) exactly the encoder's text of the metrics
    read from its rows: NaN, infinities, nulls, non-ASCII names, floats by repr, ints as the
    database gives them back; a run without metrics holds none."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'orch.db'}"
    else:
        url = request.getfixturevalue("postgres").database("t_metrics_text")
    store = Store(url)
    runs = [Run(uid=f"m{n}", experiment="e", variant="v", host="h") for n in range(3)]
    store.add(*runs)
    store.add(*(MetricRow(run_id=runs[0].id, name=name, value=value) for name, value in ODD_METRICS.items()))
    store.add(MetricRow(run_id=runs[0].id, name="int", value=99.0), MetricRow(run_id=runs[0].id, name="last", value=1.0))
    store.add_children(MetricRow, [{"run_id": runs[1].id, "name": "third", "value": 1 / 3, "source": "", "note": ""},
                                   {"run_id": runs[1].id, "name": "third", "value": 0.5, "source": "", "note": ""}])
    reader = reading.open_url(url)
    ids = [r.id for r in runs]
    from_rows = queries.run_metrics(reader, ids)
    stored = dict(reader.rows("SELECT id, metrics_json FROM run"))
    compact = json.JSONEncoder(default=str, separators=(",", ":")).encode
    assert stored == {i: compact(from_rows[i]) if i in from_rows else None for i in ids}
    assert stored[ids[0]] == metricjson.object_text(from_rows[ids[0]])
    assert list(from_rows[ids[0]]) == [*ODD_METRICS, "last"] and from_rows[ids[0]]["int"] == 3.0
    assert json.loads(stored[ids[1]]) == {"third": 1 / 3} and stored[ids[2]] is None
