"""orch report's parts on a real SQLite store filled through the real Store: configurations,
the Pareto front, escaping of database text, and the command's one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from report_runs import fill

from orchestrator import report
from orchestrator.report import data, page, pareto
from orchestrator.store.database import Store
from support.cli import orch_main


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> dict[bool, Store]:
    """The sweep's store with and without the hostile run, filled once for this file's tests."""
    folder = tmp_path_factory.mktemp("report")
    return {hostile: fill(folder / f"o{int(hostile)}.db", hostile) for hostile in (False, True)}


def test_configurations_are_orch_compares_named_by_their_swept_values(filled):
    found = data.load(filled[False], "sweep")
    c = found.comparison
    assert [len(g.run_ids) for g in c.groups] == [2, 2, 2, 1, 2]  # the repeats' ports are host-specific: one row
    assert c.varying == ["steps", "topk", "variant", "patches"] and c.constant["model"] == "/m/llama"
    assert c.by == "output_tok_s"  # the default objective: the fastest first
    assert found.label(c.groups[0]) == "steps=1 topk=4 variant=sweep patches=none"
    specs, front = page._figures(found)
    assert set(specs) == {"spread-accept_len", "spread-output_tok_s", "by-steps", "by-topk", "headline-over-time",
                          "pareto"}
    by_steps = specs["by-steps"]
    # one line per value of the other swept params, named by them, but for the patch set, which moves
    # with the variant (a line per patch set would hold the same points); startup_s is steady: on the header line
    assert [t["name"] for t in by_steps["data"]] == ["topk=1 variant=sweep", "topk=4 variant=patched",
                                                     "topk=4 variant=sweep"] * 2
    assert [t["yaxis"] for t in by_steps["data"]] == ["y"] * 3 + ["y2"] * 3
    assert by_steps["layout"]["xaxis"]["type"] == "category" and by_steps["layout"]["xaxis"]["categoryarray"] == ["1", "3"]
    # no latency recorded: throughput against accept length, both better higher
    assert specs["pareto"]["layout"]["xaxis"]["title"]["text"].startswith("accept_len (higher is better")
    assert {found.label(g) for g in c.groups if id(g) in front} == {
        "steps=3 topk=4 variant=patched patches=aux-fix", "steps=3 topk=4 variant=sweep patches=none",
        "steps=1 topk=4 variant=sweep patches=none"}
    assert len(found.runs) == 9 and "accept_rate" not in c.metrics  # recorded as absent: not a number


def test_pareto_front_keeps_the_points_nothing_beats_on_both_axes():
    points = [(1.0, 300.0), (2.0, 250.0), (1.5, 240.0), (3.0, 100.0), (2.0, 250.0)]
    assert pareto.pareto_front(points) == [0, 1, 4, 3]


def test_database_text_is_escaped_everywhere(filled, tmp_path):
    out = tmp_path / "r.html"
    report.write(filled[True], "sweep", out)
    page = out.read_text()
    assert "<script>window.__injected" not in page and '<img src="http' not in page
    assert page.count("<script") == 3  # plotly.js, the figures' JSON, the drawing code: none from the data
    assert "&lt;script&gt;window.__injected" in page  # shown as text: in the table, a run's summary, debug lines
    specs = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)[1])
    assert set(specs) == {"spread-accept_len", "spread-output_tok_s", "by-model", "by-steps", "by-topk",
                          "headline-over-time", "pareto"}
    names = [t["name"] for t in specs["headline-over-time"]["data"]]
    assert len(names) == 10 and any("&lt;script&gt;" in n for n in names)  # Plotly renders markup in names


def test_command_writes_the_file_and_bad_input_is_one_line(filled, tmp_path):
    db = ["--db", filled[False].url]
    code, said, _, _ = orch_main(None, ["report", "sweep", "-o", str(tmp_path / "r.html")], db, merge=True, strict=True)
    assert code == 0 and f"wrote {tmp_path / 'r.html'}: 9 runs of sweep" in " ".join(said.split())
    assert (tmp_path / "r.html").stat().st_size > 4e6  # plotly.js is in the file
    code, said, _, _ = orch_main(None, ["report", "nothing"], db, merge=True, strict=True)
    assert code == 2 and "no runs of experiment 'nothing'" in said and len(said.strip().splitlines()) == 1
    code, said, _, _ = orch_main(None, ["report", "sweep", "-o", str(tmp_path / "no" / "r.html")], db, merge=True, strict=True)
    assert code == 2 and "not a file in an existing folder" in said and len(said.strip().splitlines()) == 1


def test_help_does_not_load_the_report_or_plotly():
    code = "import sys, orchestrator.cli; print(any(m.startswith(('plotly', 'orchestrator.report')) for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_experiment_records_read_at_once_match_each_runs_record(filled):
    from orchestrator.store import records

    store = filled[True]
    bulk = records.experiment_records(store, "sweep", series_value="accept_len")
    assert [r["id"] for r in bulk] == [r.id for r in store.runs(experiment="sweep")]
    for got, run in zip(bulk, store.runs(experiment="sweep")):
        whole = store.record(run)
        for key in ("uid", "variant", "host", "status", "repeat", "params", "flags", "metrics", "patches",
                    "debug_lines", "error", "started_at"):
            assert got[key] == whole[key], key
        assert got["series"] == [{"kind": p["kind"], "time": p["time"], "accept_len": p["accept_len"]}
                                 for p in whole["series"]]  # only the value the report draws


def test_an_experiment_without_a_succeeded_run_still_lists_its_runs(tmp_path):
    from orchestrator.store.database import Run

    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    store.add(Run(uid="2026-failed", experiment="broken", variant="v", host="local", status="failed",
                  error="server exited 1 <before ready>"))
    report.write(store, "broken", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "nothing to compare" in page and "server exited 1 &lt;before ready&gt;" in page
    assert "no run's series carries accept_len" in page  # the one figure, empty, says why
