"""Issue 24, item 8: a server line of any length is stored cut to a bound, with a marker, so `orch show`
and the report stay small and fast after a server printed a 100 MB line (the log itself is kept whole)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from support.cli import orch
from support.specs import FIXTURES

from orchestrator.bounds import LINE_BOUND, cut_line
from orchestrator.engines.base import Diagnosis

HUGE = 100 * 2**20


def _log_with_a_huge_debug_line(folder: Path) -> Path:
    lines = (FIXTURES / "sglang_eagle3_debug.log").read_bytes().splitlines(keepends=True)
    huge = b"[EAGLE3-DEBUG] shape=torch.Size([1, 7168]) blob=" + b"x" * HUGE + b"\n"
    log = folder / "huge.log"
    log.write_bytes(b"".join(lines[:40]) + huge + b"".join(lines[40:]))
    return log


def test_a_100_mb_debug_line_is_stored_cut_and_show_and_report_stay_small(tmp_path):
    log = _log_with_a_huge_debug_line(tmp_path)
    done = orch(tmp_path, "import", str(log), timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "orch.db") as db:
        longest, = db.execute("SELECT max(length(text)) FROM debugrow").fetchone()
        texts = [t for t, in db.execute("SELECT text FROM debugrow WHERE text LIKE '%blob=%'")]
        fields = [json.loads(f) for f, in db.execute("SELECT fields FROM debugrow WHERE text LIKE '%blob=%'")]
    assert longest < LINE_BOUND + 200
    assert len(texts) == 1 and texts[0].endswith(f"more characters cut by orch: line over {LINE_BOUND}]")
    assert fields[0]["shape"] == "torch.Size([1, 7168])" and "cut by orch" in fields[0]["blob"]
    started = time.monotonic()
    shown = orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False)
    assert shown.returncode == 0 and time.monotonic() - started < 10
    assert len(shown.stdout) < 2 * 2**20
    report = orch(tmp_path, "report", "imported", "-o", str(tmp_path / "r.html"), timeout=120, inventory=False)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").stat().st_size < 20 * 2**20  # the plotting script is 4.8 MB; the line was 100
    assert len(orch(tmp_path, "logs", "last", timeout=120, inventory=False).stdout) > HUGE  # the log itself is kept whole


def test_a_line_within_the_bound_is_kept_as_it_is():
    assert cut_line("x" * LINE_BOUND) == "x" * LINE_BOUND
    cut = cut_line("y" * (LINE_BOUND + 5))
    assert cut.startswith("y" * LINE_BOUND) and "5 more characters cut by orch" in cut


def test_a_diagnosis_quoting_a_huge_log_line_is_stored_cut():
    record = Diagnosis("cuda-oom", "out of memory", ("E" * (3 * LINE_BOUND), "short")).as_record()
    assert len(record["evidence"][0]) < LINE_BOUND + 200 and "cut by orch" in record["evidence"][0]
    assert record["evidence"][1] == "short"
