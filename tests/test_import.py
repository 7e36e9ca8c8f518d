"""`orch import`: a run made by hand, recorded from its log (the real command, a real SQLite file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

from orchestrator import engines
from orchestrator.core.spec import DEFAULT_DEBUG_PATTERN
from orchestrator.engines.sglang.imported import launch_command, server_args
from support.cli import orch
from support.specs import FIXTURES


def test_import_of_the_eagle3_debug_log(tmp_path):
    log = FIXTURES / "sglang_eagle3_debug.log"
    done = orch(tmp_path, "import", str(log), "--name", "kimi-by-hand", "--params", "draft_step=12000",
                "--host", "gpu-node-7", timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "draft-rejected" in done.stdout and "--tp-size 8" in done.stdout
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert (record["experiment"], record["variant"], record["host"], record["status"]) == (
        "imported", "kimi-by-hand", "gpu-node-7", "succeeded")
    assert record["params"] == {"model_path": "/data/models/Kimi-K2.5", "tp_size": 8, "mem_fraction_static": 0.82,
                                "draft_model_path": "/data/ckpt/kimi-eagle3/epoch_3_step_12000",
                                "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "port": 30000,
                                "draft_step": 12000}
    assert record["metrics"]["accept_len"] == 1.0 and record["metrics"]["decode_intervals"] == 12
    assert record["flags"] == ["draft-rejected"] and record["diagnosis"] is None
    shapes = [d["fields"]["shape"] for d in record["debug_lines"]]
    assert shapes[:8] == ["torch.Size([1, 7168])"] * 8 and len(shapes) == 8 + 12 * 8
    assert record["command"].startswith("python -m sglang.launch_server --model-path /data/models/Kimi-K2.5")
    for part in ("--tp-size 8", "--speculative-algorithm EAGLE3", "--trust-remote-code",
                 "--speculative-num-draft-tokens 4", "--json-model-override-args '{}'"):
        assert part in record["command"]
    assert "--disable-cuda-graph" not in record["command"] and "--lora-paths" not in record["command"]
    assert orch(tmp_path, "logs", "last", timeout=120, inventory=False).stdout == log.read_text()


def test_import_of_a_crashed_server_exits_1_with_the_diagnosis(tmp_path):
    done = orch(tmp_path, "import", str(FIXTURES / "cuda_oom.log"), timeout=120, inventory=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "diagnosis:" in done.stdout and "--mem-fraction-static" in done.stdout
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["status"] == "failed" and record["variant"] == "cuda_oom"
    assert record["diagnosis"]["kind"] == "cuda-oom"
    assert "torch.OutOfMemoryError" in record["diagnosis"]["evidence"][0]


def test_bad_input_is_one_line_exit_2_and_records_nothing(tmp_path):
    missing = orch(tmp_path, "import", str(tmp_path / "nope.log"), timeout=120, inventory=False)
    assert missing.returncode == 2 and "nope.log: cannot read the log" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    bad = orch(tmp_path, "import", str(FIXTURES / "clean.log"), "--params", "novalue", timeout=120, inventory=False)
    assert bad.returncode == 2 and "--params 'novalue': expected key=value" in bad.stderr
    assert json.loads(orch(tmp_path, "ls", "--json", timeout=120, inventory=False).stdout) == []


def test_server_args_are_read_as_literals_never_run():
    text = ("ServerArgs(model_path='m', tp_size=8, ratio=0.5, flag=True, none=None, ids=[1, 2], "
            "algo=<SpeculativeAlgorithm.EAGLE3: 3>, hook=__import__('os').system('false'))")
    args = server_args(text)
    assert args["model_path"] == "m" and args["tp_size"] == 8 and args["ids"] == [1, 2] and args["flag"] is True
    assert args["hook"] == "__import__('os').system('false')"  # kept as text
    assert server_args("garbage") == {} and server_args(None) == {}
    assert launch_command({"model_path": "a b", "flag": True, "off": False, "none": None, "ids": [1, 2]}) == \
        "python -m sglang.launch_server --model-path 'a b' --flag --ids 1 2"


def test_series_of_an_imported_log_as_a_table_and_as_csv(tmp_path):
    log = FIXTURES / "sglang_eagle3_debug.log"
    assert orch(tmp_path, "import", str(log), timeout=120, inventory=False).returncode == 0
    table = orch(tmp_path, "series", "last", timeout=120, inventory=False)
    assert table.returncode == 0 and "decode series (12 log lines)" in table.stdout, table.stdout + table.stderr
    assert "accept_len" in table.stdout and "gen_throughput" in table.stdout
    lines = orch(tmp_path, "series", "last", "--kind", "prefill", "--csv", timeout=120, inventory=False).stdout.splitlines()
    prefill = [line for line in log.read_text().splitlines() if "Prefill batch" in line]
    assert len(lines) == 1 + len(prefill) == 14
    header = lines[0].split(",")
    assert header[0] == "time" and {"new_seq", "new_token", "cached_token", "input_throughput"} <= set(header)
    first = dict(zip(header, lines[1].split(",")))
    assert (first["time"], first["new_token"], first["queue_req"]) == ("2026-11-20 14:02:14", "7", "0")
    bad = orch(tmp_path, "series", "last", "--kind", "verify", timeout=120, inventory=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "decode, prefill" in bad.stderr


def test_import_reads_a_log_on_an_inventory_host(project):
    """HOST:PATH reads the log over the host's transport (here the local one) and records that host."""
    log = project / "host-logs" / "kimi_by_hand.log"
    log.parent.mkdir()
    log.write_bytes((FIXTURES / "sglang_eagle3_debug.log").read_bytes())
    done = orch(project, "import", f"local:{log}", timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert (record["host"], record["variant"], record["metrics"]["decode_intervals"]) == ("local", "kimi_by_hand", 12)
    assert any(e["kind"] == "imported" and f"local:{log}" in e["message"] for e in record["events"])


def test_a_missing_log_on_a_host_is_one_line_exit_2_and_records_nothing(project):
    done = orch(project, "import", f"local:{project}/no/such.log", timeout=120, inventory=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"local:{project}/no/such.log: no such log on the host" in done.stderr
    unknown = orch(project, "import", "gpu9:/var/log/sglang.log", timeout=120, inventory=False)
    assert unknown.returncode == 2 and "'gpu9' is not a host of" in unknown.stderr
    assert json.loads(orch(project, "ls", "--json", timeout=120, inventory=False).stdout) == []


def test_import_over_ssh_cuts_a_big_log_down_on_the_host(sshd_box, no_user_ssh, tmp_path, monkeypatch):
    """Through a real sshd: a log over the fetch limit comes back as the lines the parser reads
    plus its tail, and parses to the same decode series and debug lines as the whole log."""
    import asyncio

    from orchestrator.run import logimport
    from orchestrator.host import server
    from orchestrator.engines.sglang.logs import parse_log_bytes

    known = tmp_path / "known_hosts"
    known.write_text(sshd_box.known_line())
    host = sshd_box.host(known, tmp_path / "work")
    noise = b"".join(b"[2026-11-20 14:02:15] INFO:     127.0.0.1:5000 - \"POST /generate HTTP/1.1\" 200 OK\n"
                     for _ in range(20000))
    whole = (FIXTURES / "sglang_eagle3_debug.log").read_bytes()
    head, _, rest = whole.partition(b"\n[2026-11-20 14:02:22")
    log = tmp_path / "big.log"
    log.write_bytes(head + b"\n" + noise + b"[2026-11-20 14:02:22" + rest)
    monkeypatch.setattr(server, "FETCH_LIMIT", 1 << 20)
    for name in engines.KNOWN:
        monkeypatch.setattr(engines.get(name), "log_tail_size", 4096)
    source = asyncio.run(logimport.read_remote(host, str(log), DEFAULT_DEBUG_PATTERN))
    assert source.host == "box" and source.where == f"box:{log}" and "cut down on the host" in source.note
    assert len(source.data) < log.stat().st_size // 10
    fetched, full = parse_log_bytes(source.data), parse_log_bytes(log.read_bytes())
    assert fetched.decode == full.decode and fetched.debug_lines == full.debug_lines and len(full.decode) == 12
    assert fetched.server_args == full.server_args and fetched.ready == full.ready


def test_import_rebuilds_params_and_command_from_0523s_dict(tmp_path):
    """0.5.23 logs `server_args={...}` (the repr of ServerArgs.resolved_dict()), not ServerArgs(...)."""
    done = orch(tmp_path, "import", str(FIXTURES / "server_args_dict.log"), timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["params"] == {"model_path": "/data/models/Kimi-K2.5", "tp_size": 8, "mem_fraction_static": 0.82,
                                "draft_model_path": "/data/ckpt/kimi-eagle3/epoch_3_step_12000",
                                "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "port": 30000}
    for part in ("--tp-size 8", "--speculative-algorithm EAGLE3", "--trust-remote-code",
                 """--cuda-graph-config '{"decode": {"backend": "full", "max_bs": 48}, "prefill": {"backend": "breakable"}}'"""):
        assert part in record["command"]
    assert "--lora-paths" not in record["command"] and "--disable-radix-cache" not in record["command"]
    assert record["metrics"]["accept_rate"] == 0.77
    notes = {s["note"] for s in record["metric_sources"]["accept_rate"] + record["metric_sources"]["accept_len"]}
    assert notes == {"mean of 2 decode-line intervals (imported log)"}
    shown = orch(tmp_path, "show", "last", timeout=120, inventory=False).stdout
    assert "mean of 2 decode-line intervals" in shown


def test_import_warns_when_it_finds_no_server_args(tmp_path):
    done = orch(tmp_path, "import", str(FIXTURES / "prefix_time_only.log"), timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning:" in done.stdout and "no `server_args=` line" in done.stdout and "--params" in done.stdout
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["command"] == "" and record["params"] == {}
    assert [e["kind"] for e in record["events"]].count("warning") == 1
    odd = tmp_path / "odd.log"
    odd.write_text("[2026-01-01 00:00:00] server_args=<object at 0x7f>\n" + (FIXTURES / "clean.log").read_text())
    done = orch(tmp_path, "import", str(odd), timeout=120, inventory=False)
    assert "neither `ServerArgs(...)`" in done.stdout and "0.5.23" in done.stdout


def test_a_server_args_line_cut_short_gives_the_fields_before_the_cut(tmp_path):
    cut = tmp_path / "cut.log"
    cut.write_text("[2026-01-01 00:00:00] server_args={'model_path': 'm', 'tp_size': 2, 'speculative_algo\n"
                   + (FIXTURES / "clean.log").read_text())
    done = orch(tmp_path, "import", str(cut), timeout=120, inventory=False)
    assert "cut short" in done.stdout and "first 2 fields" in done.stdout
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["params"] == {"model_path": "m", "tp_size": 2}


def test_server_args_dict_values_are_read_as_literals_never_run():
    text = ("{'model_path': 'm', 'algo': <SpeculativeAlgorithm.EAGLE3: 3>, 'ids': [1, 2], "
            "'graphs': {'decode': {'max_bs': 8}}, 'hook': __import__('os').system('false'), 'note': 'a, b'}")
    assert server_args(text) == {"model_path": "m", "algo": "<SpeculativeAlgorithm.EAGLE3: 3>", "ids": [1, 2],
                                 "graphs": {"decode": {"max_bs": 8}}, "hook": "__import__('os').system('false')",
                                 "note": "a, b"}
    assert server_args("{'model_path': 'm'}") == {"model_path": "m"}


# --- the write path into a database already at this orch's schema: plain DB-API, the same rows ---

MASKED = {"uid", "started_at", "ended_at", "at"}  # made afresh by each import


def _rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, the columns an import makes afresh left out."""
    import sqlite3

    with sqlite3.connect(path) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        found = {}
        for table in tables:
            cursor = db.execute(f"SELECT * FROM {table} ORDER BY rowid")
            keep = [i for i, d in enumerate(cursor.description) if d[0] not in MASKED]
            found[table] = [tuple(row[i] for i in keep) for row in cursor]
    return found


@pytest.mark.parametrize("log", [FIXTURES / "sglang_eagle3_debug.log", FIXTURES / "cuda_oom.log",
                                 FIXTURES / "server_args_dict.log",
                                 Path(__file__).parent / "fixtures" / "vllm" / "spec_0.10.1.1.log"])
def test_an_import_through_plain_db_api_stores_the_rows_the_store_does(tmp_path, log):
    from orchestrator.run import logimport
    from orchestrator.store import importing
    from orchestrator.store.database import Store

    through_store, plain = tmp_path / "store.db", tmp_path / "plain.db"
    for url, kind in ((f"sqlite:///{plain}", importing.Writer),  # a new one: made at the schema first
                      ("sqlite://", logimport._Through)):  # a database in memory: through the store
        made = logimport.writer(url)
        assert isinstance(made, kind)
        made.close()
    for db, sink in ((through_store, lambda url: logimport._Through(Store(url))), (plain, logimport.writer)):
        for _ in range(2):  # a second run: ids and rows after another's
            done = logimport.record(sink(f"sqlite:///{db}"), logimport.read_local(log), None, {"draft_step": 12000},
                                    None, DEFAULT_DEBUG_PATTERN)
    assert _rows(plain) == _rows(through_store)
    found = _rows(plain)
    assert len(found["run"]) == 2 and found["logrow"] and found["metricrow"] and done.run_id == 2


def test_an_import_through_plain_db_api_stores_the_rows_the_store_does_on_postgresql(postgres):
    import psycopg

    from orchestrator.run import logimport
    from orchestrator.store import importing
    from orchestrator.store.database import Store

    through_store, plain = postgres.database("t_import_store"), postgres.database("t_import_plain")
    for url, sink in ((through_store, lambda url: logimport._Through(Store(url))), (plain, logimport.writer)):
        for _ in range(2):
            logimport.record(sink(url), logimport.read_local(FIXTURES / "sglang_eagle3_debug.log"), None, {}, None,
                             DEFAULT_DEBUG_PATTERN)
    assert isinstance(logimport.writer(plain), importing.Writer)

    def rows(url: str) -> dict[str, list[tuple]]:
        with psycopg.connect(url) as db:
            tables = [name for (name,) in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = "
                                                     "current_schema() ORDER BY tablename")]
            found = {}
            for table in tables:
                cursor = db.execute(f"SELECT * FROM {table} ORDER BY 1")
                keep = [i for i, d in enumerate(cursor.description) if d.name not in MASKED]
                found[table] = [tuple(row[i] for i in keep) for row in cursor]
        return found

    found = rows(plain)
    assert found == rows(through_store) and sum(block[4] for block in found["seriesblockrow"]) == 2 * 25  # points


def test_an_import_into_an_older_database_upgrades_it_first(tmp_path):
    """A database of schema 2 (before the runs' metrics text) is upgraded by the store, then written plainly."""
    import sqlite3

    from orchestrator.run import logimport
    from orchestrator.store import importing, schema
    from orchestrator.store.database import Store

    db = tmp_path / "old.db"
    Store(f"sqlite:///{db}").engine.dispose()
    with sqlite3.connect(db) as conn:  # as an orch of schema 2 left it
        conn.execute("ALTER TABLE run DROP COLUMN metrics_json")
        conn.execute(f"UPDATE {schema.TABLE} SET version = 2")
    assert importing.open_current(f"sqlite:///{db}") is None
    log = logimport.read_local(FIXTURES / "sglang_eagle3_debug.log")
    done = logimport.record(logimport.writer(f"sqlite:///{db}"), log, None, {}, None, DEFAULT_DEBUG_PATTERN)
    with sqlite3.connect(db) as conn:
        assert conn.execute(f"SELECT max(version) FROM {schema.TABLE}").fetchone() == (schema.VERSION,)
        text, = conn.execute("SELECT metrics_json FROM run WHERE id = ?", (done.run_id,)).fetchone()
    assert json.loads(text)["decode_intervals"] == 12.0


def test_a_fresh_file_is_made_at_the_schema_the_store_makes(tmp_path):
    """The statements freshfile makes from store/tables.py are the ones SQLAlchemy makes of the
    models (tests/test_store_tables.py: the rows round-trip); the store then opens the file as current
    (no upgrade, no copy kept); a second maker finds the name taken and leaves the file alone."""
    from orchestrator.store import freshfile
    from orchestrator.store.database import Store

    by_store, fresh = tmp_path / "store.db", tmp_path / "fresh.db"
    Store(f"sqlite:///{by_store}").engine.dispose()
    assert freshfile.make(fresh) and sorted(freshfile.statements_of(fresh)) == sorted(freshfile.statements_of(by_store))
    before = fresh.read_bytes()
    assert not freshfile.make(fresh) and fresh.read_bytes() == before
    assert not freshfile.make(tmp_path / "no-such-folder" / "orch.db")
    Store(f"sqlite:///{fresh}").engine.dispose()
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert left == ["fresh.db", "store.db"]  # no copy kept for an upgrade, no partial file
    import sqlite3

    with sqlite3.connect(fresh) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT version FROM orch_schema").fetchall() == [(freshfile.VERSION,)]


@pytest.mark.parametrize("made", [True, False], ids=["existing", "new"])
def test_orch_import_into_a_database_at_this_schema_imports_no_sqlalchemy(tmp_path, made):
    """The real command into a database the store made, or into none yet: it writes through plain
    DB-API, without the store's libraries."""
    from orchestrator.store.database import Store

    log = FIXTURES / "sglang_eagle3_debug.log"
    if made:
        Store(f"sqlite:///{tmp_path / 'orch.db'}").engine.dispose()
    probe = ("import sys, runpy; sys.argv = ['orch', 'import', sys.argv[1]]\n"
             "try: runpy.run_module('orchestrator.cli', run_name='__main__')\n"
             "except SystemExit as exc: code = exc.code\n"
             "print('loaded:', sorted(m for m in ('sqlalchemy', 'sqlmodel', 'pydantic') if m in sys.modules), code)")
    env = {**os.environ, "ORCH_DB": f"sqlite:///{tmp_path / 'orch.db'}", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", probe, str(log)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert "loaded: [] 0" in done.stdout and "run 1 (" in done.stdout, done.stdout + done.stderr
