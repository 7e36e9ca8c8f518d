"""`orch compare`: runs written through the real Store into a real SQLite file, grouped into
configurations, repeats aggregated, the best row and the rows within noise marked."""

from __future__ import annotations

import json

import pytest

from orchestrator.core import compare
from orchestrator.store import queries
from orchestrator.store.database import FAILED, INTERRUPTED, Store
from support.cli import orch_main
from support.specs import make_run

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """steps 3: accept 2.0-2.2 (3 repeats, two hosts and ports); steps 5: 2.8-3.0; steps 7: 2.9 alone;
    one failed and one interrupted run that do not count. Read only: one file for the module's tests."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('compare') / 'orch.db'}")
    rows = [(3, 2.0, 100), (3, 2.2, 160), (5, 3.0, 150), (5, 2.8, 80), (3, 2.1, 120), (7, 2.9, 80)]
    for n, (steps, accept, tok_s) in enumerate(rows):
        make_run(store, n, steps=steps, accept=accept, tok_s=tok_s, host="ab"[n % 2], port=30000 + n)
    make_run(store, 6, steps=9, accept=9.0, tok_s=999, status=FAILED)
    make_run(store, 7, steps=9, accept=9.0, tok_s=999, status=INTERRUPTED)
    return store


def comparison(store, by="accept_len", where=None):
    runs = [r for r in queries.comparable_runs(store, "sweep") if compare.matches(r["params"], where or {})]
    return compare.compare("sweep", runs, {}, by, frozenset({"port", "gpus"}))


def test_repeats_are_one_row_each_with_median_and_spread_best_first(store):
    c = comparison(store)
    assert [g.params["steps"] for g in c.groups] == [5, 7, 3]
    five, seven, three = c.groups
    assert five.stat("accept_len") == compare.Stat(2, 2.9, 2.8, 3.0)
    assert three.stat("accept_len") == compare.Stat(3, 2.1, 2.0, 2.2) and len(three.run_ids) == 3
    # the best row, one inside its spread (2.9 within 2.8-3.0), one outside it
    assert [g.mark for g in c.groups] == [compare.BEST, compare.NOISE, ""]
    # host-specific params (port, gpus) and the param written with a host reference do not split groups
    assert c.varying == ["steps"] and c.constant == {"topk": 1, "variant": "fixed", "patches": "fix"}
    assert c.steady == {"requests": 16.0}
    assert c.metrics[:2] == ["accept_len", "output_tok_s"]


def test_lower_is_better_metrics_rank_ascending(store):
    assert compare.lower_is_better("startup_s") and compare.lower_is_better("ttft_ms")
    assert not compare.lower_is_better("output_tok_s") and not compare.lower_is_better("accept_len")
    c = comparison(store, by="startup_s")  # startup 10 + n: steps 3 took 10, 11, 14 s; steps 5 12, 13; steps 7 15
    assert [(g.params["steps"], g.stat("startup_s").median, g.mark) for g in c.groups] == [
        (3, 11.0, compare.BEST), (5, 12.5, compare.NOISE), (7, 15.0, "")]

def test_runs_of_another_patch_set_are_another_configuration(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    make_run(store, 0, steps=3, accept=2.0, tok_s=1)
    make_run(store, 1, steps=3, accept=2.5, tok_s=1, patch_sha="c" * 64)
    c = comparison(store)
    assert len(c.groups) == 2 and [g.mark for g in c.groups] == [compare.BEST, ""]  # one run each: no spread


def test_where_keeps_the_matching_configurations(store):
    c = comparison(store, where={"steps": 3})
    assert len(c.groups) == 1 and c.groups[0].params["steps"] == 3
    assert compare.matches({"steps": 3}, {"steps": "3"}) and not compare.matches({"steps": 3}, {"topk": 3})


def test_compare_command_table_json_and_csv(store, monkeypatch, capsys):
    code, out, _, _ = orch_main(None, ["compare", "sweep"], ["--db", store.url], strict=True)
    assert code == 0
    assert "6 succeeded run(s) in 3 configuration(s); left out: 1 failed, 1 interrupted" in out
    assert "best by output_tok_s: steps=3 (runs 1, 2, 5); 1 other configuration(s) within noise" in out  # the default
    code, out, _, _ = orch_main(None, ["compare", "sweep", "--by", "accept_len"], ["--db", store.url], strict=True)
    assert "best by accept_len: steps=5 (runs 3, 4); 1 other configuration(s) within noise" in out
    code, out, _, _ = orch_main(None, ["compare", "sweep", "--by", "output_tok_s", "--json"], ["--db", store.url], strict=True)
    data = json.loads(out)
    assert [(r["params"]["steps"], r["mark"]) for r in data["rows"]] == [(3, "best"), (5, "within noise"),
                                                                       (7, None)]
    assert data["rows"][0]["metrics"]["output_tok_s"] == {"n": 3, "median": 120.0, "min": 100.0, "max": 160.0}
    assert data["left_out"] == {"failed": 1, "interrupted": 1}
    code, out, _, _ = orch_main(None, ["compare", "sweep", "--csv", "--where", "steps=5"], ["--db", store.url], strict=True)
    header, row = out.splitlines()
    assert header.startswith("mark,n,runs,output_tok_s_median,output_tok_s_min,output_tok_s_max,accept_len_median,")
    assert row.startswith("best,2,3 4,115.0,80.0,150.0,2.9,2.8,3.0,")


@pytest.mark.parametrize(("args", "message"), [
    (("compare", "swep"), "no experiment 'swep' in sqlite:///"),
    (("compare", "sweep", "--by", "accept_length"), "--by accept_length: no succeeded run of 'sweep' has that "
                                                     "metric; did you mean 'accept_len'?"),
    (("compare", "sweep", "--where", "step=3"), "--where step: no run of 'sweep' has a param 'step'; did you mean "
                                                "'steps'?"),
    (("compare", "sweep", "--where", "steps"), "--where 'steps': expected key=value"),
])
def test_bad_compare_input_is_one_line_and_exit_2(store, monkeypatch, capsys, args, message):
    code, _, err, _ = orch_main(None, [*args], ["--db", store.url], strict=True)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    if args[1] == "swep":
        assert "did you mean 'sweep'?" in err


def test_the_table_shows_the_headline_metrics_unless_told_which(store, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _, _ = orch_main(None, ["compare", "sweep"], ["--db", store.url], strict=True)
    assert code == 0 and "accept_len" in out and "output_tok_s" in out and "startup_s" in out
    code, out, _, _ = orch_main(None, ["compare", "sweep", "--metrics", "output_tok_s"], ["--db", store.url], strict=True)
    header = next(line for line in out.splitlines() if "output_tok_s" in line and "steps" in line)
    assert "accept_len" not in header and "startup_s" not in header
    assert "2 more metric(s) not shown (accept_len, startup_s): --metrics NAME,... or --metrics all" in out
    code, _, err, _ = orch_main(None, ["compare", "sweep", "--metrics", "tok_s"], ["--db", store.url], strict=True)
    assert code == 2 and "--metrics 'tok_s': no run of 'sweep' records it" in err and len(err.strip().splitlines()) == 1
