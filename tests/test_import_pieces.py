"""`orch import` of a log bigger than a piece: read, masked, compressed and parsed piece by piece
(run/logpieces.py, engines/sglang/logstream.py), it is stored exactly as the same log read whole;
and series stored as packed blocks read back as the points were (engines/seriesblock.py), next to
the one-row-per-point series of runs recorded before schema 5."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.core.spec import DEFAULT_DEBUG_PATTERN
from orchestrator.engines import seriesblock
from orchestrator.engines.sglang import logs as sglang_logs, logstream
from orchestrator.records import SeriesPoint
from orchestrator.run import logimport, logpieces
from orchestrator.store import reading, records

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
TOKEN = "hf_" + "a1B2c3D4e5" * 3  # a token shape: hidden wherever it appears
STYLES = ("prefix_dp_tp.log", "prefix_time_only.log", "terminal_cut.log", "prefix_logging_level.log")


def big_log(folder: Path, crash: str) -> Path:
    """The eagle3 debug log, then stats lines of several styles (a block of one style parses in one
    regex; a block mixing them line by line), a token, and a crash at the very end."""
    middle = b"".join((FIXTURES / name).read_bytes() for name in STYLES)
    parts = [(FIXTURES / "sglang_eagle3_debug.log").read_bytes(), middle * 160,
             f"[2026-10-30 12:00:00] using HF_TOKEN={TOKEN} for the download\n".encode(), middle * 160,
             f"[2026-10-30 12:00:01] fetched with {TOKEN} from the mirror\n".encode(),
             (FIXTURES / crash).read_bytes()]
    path = folder / "server.log"
    path.write_bytes(b"".join(parts))
    return path


def imported(folder: Path, log: Path, name: str) -> dict:
    url = f"sqlite:///{folder / (name + '.db')}"
    done = logimport.record(logimport.writer(url), logimport.read_local(log), name, {"draft": 1}, None,
                            DEFAULT_DEBUG_PATTERN)
    reader = reading.open_url(url)
    found = reading.record(reader, reading.get(reader, str(done.run_id)))
    found["log"] = reading.log(reader, done.run_id)
    found["report_series"] = records.experiment_records(reader, "imported", "accept_len")[0]["series"]
    for key in ("uid", "started_at", "ended_at", "variant"):
        found.pop(key)
    found["events"] = [{k: v for k, v in e.items() if k != "at"} for e in found["events"]]
    return found


@pytest.mark.parametrize("crash", ["scheduler_exception.log", "cuda_oom.log"])
def test_a_log_read_in_pieces_is_stored_as_the_same_log_read_whole(tmp_path, monkeypatch, crash):
    log = big_log(tmp_path, crash)
    whole = imported(tmp_path, log, "whole")  # under a piece: read whole, as before
    # the head and tail searched for failures made small, so they do not cover the whole log
    for module in (sglang_logs, logstream):
        monkeypatch.setattr(module, "HEAD_SIZE", 256 << 10)
    monkeypatch.setattr(sglang_logs, "TAIL_SIZE", 128 << 10)
    whole_small_ends = imported(tmp_path, log, "whole_small_ends")
    monkeypatch.setattr(logpieces, "PIECE", 64 << 10)  # about 30 pieces
    in_pieces = imported(tmp_path, log, "pieces")
    assert log.stat().st_size > 16 * (64 << 10)
    assert whole["diagnosis"] is not None and whole["status"] == "failed"
    assert len(whole["series"]) > 5_000 and len(whole["debug_lines"]) > 100
    assert whole["metrics"]["accept_len"] and whole["params"]["draft"] == 1 and whole["command"]
    assert in_pieces == whole_small_ends
    assert TOKEN.encode() not in in_pieces["log"]
    assert b"HF_TOKEN=<secret:HF_TOKEN>" in in_pieces["log"] and b" <secret:hf_...>" in in_pieces["log"]
    assert in_pieces["series"] == whole["series"] and in_pieces["metrics"] == whole["metrics"]


def test_a_log_read_in_pieces_whole_in_its_head_and_tail_is_diagnosed_as_a_whole_log(tmp_path, monkeypatch):
    """Under HEAD_SIZE + TAIL_SIZE the pieces kept are the whole log: its failures are read as the
    whole log's, the evidence of the head and the tail merged where they meet."""
    log = big_log(tmp_path, "scheduler_exception.log")
    whole = imported(tmp_path, log, "whole")
    monkeypatch.setattr(logpieces, "PIECE", 64 << 10)
    assert imported(tmp_path, log, "pieces") == whole


def test_a_series_block_gives_back_its_points(tmp_path):
    points = [SeriesPoint("decode", i, f"12:00:0{i}" if i % 3 else None,
                          {"accept_len": 1.5 + i, "tokens": 10 * i, "queue_req": None, "ranks": "DP1 TP0",
                           "mixed": 3 if i else 3.5, "graph": [i], **({"cap len": 2.0} if i % 2 else {})})
              for i in range(7)] + [SeriesPoint("prefill", 0, "12:00:09", {"new_token": 512})]
    blocks = seriesblock.from_points(points)
    back = [p for b in blocks for p in seriesblock.points(seriesblock.unpack(b.kind, b.first, seriesblock.pack(b)))]
    assert back == points
    assert [list(p.values) for p in back] == [[k for k in p.values] for p in points]
    assert type(back[1].values["tokens"]) is int and back[0].values["mixed"] == 3.5 and back[1].values["mixed"] == 3
    kinds = {c.name: c.kind for c in blocks[0].columns}
    assert kinds["accept_len"] == seriesblock.FLOAT and kinds["tokens"] == seriesblock.INT
    assert seriesblock.column_of(blocks[0], "cap len") == [("12:00:01", 2.0), (None, 2.0), ("12:00:05", 2.0)]
    assert math.isnan(seriesblock.filled("x", seriesblock.FLOAT, 2).values[1])


def test_series_rows_of_a_run_before_schema_5_are_read_with_the_blocks(tmp_path):
    from orchestrator.store.database import Run, SeriesBlockRow, SeriesRow, Store
    from orchestrator.store import series

    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    old, new = Run(uid="old", experiment="e", variant="v", host="h"), Run(uid="new", experiment="e", variant="v", host="h")
    store.add(old, new)
    store.add_children(SeriesRow, [{"run_id": old.id, "kind": "decode", "seq": i, "time": f"t{i}",
                                    "values": {"accept_len": 2.0 + i}} for i in range(3)])
    points = [SeriesPoint("decode", i, f"t{i}", {"accept_len": 3.0 + i}) for i in range(4)]
    store.add_children(SeriesBlockRow, series.block_values(new.id, seriesblock.from_points(points)))
    reader = reading.open_url(store.url)
    assert reading.record(reader, reading.get(reader, "old"))["series"] == [
        {"kind": "decode", "time": f"t{i}", "accept_len": 2.0 + i} for i in range(3)]
    assert reading.record(reader, reading.get(reader, "new"))["series"] == [
        {"kind": "decode", "time": f"t{i}", "accept_len": 3.0 + i} for i in range(4)]
    shown = {r["uid"]: r["series"] for r in records.experiment_records(reader, "e", "accept_len")}
    assert shown == {"old": [{"kind": "decode", "time": f"t{i}", "accept_len": 2.0 + i} for i in range(3)],
                     "new": [{"kind": "decode", "time": f"t{i}", "accept_len": 3.0 + i} for i in range(4)]}
