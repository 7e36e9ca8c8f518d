"""orch report on a steps x topk tuning sweep (tuning_runs.py, a real SQLite store): ranked as
`orch compare` ranks (the objective, `--by`), every configuration named by its swept values in each
axis, legend and table, constant params on a header line, throughput against latency with its
Pareto front."""

from __future__ import annotations

import itertools
import re
import statistics

import pytest
import tuning_runs

from orchestrator import report
from orchestrator.report import data, page
from support.cli import orch_main

STEPS, TOPK = "speculative_num_steps", "speculative_eagle_topk"
LABELS = {f"{STEPS}={s} {TOPK}={k}" for s, k in itertools.product(tuning_runs.STEPS, tuning_runs.TOPK)}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tuning")
    return {"plain": tuning_runs.fill(folder / "plain.db"),
            "at_least_2": tuning_runs.fill(folder / "a.db", {"maximize": "output_tok_s", "subject_to": ["accept_len >= 2"]}),
            "median_itl": tuning_runs.fill(folder / "m.db", {"maximize": "output_tok_s", "subject_to": ["itl_ms_p50 <= 8"]})}


def first(found: data.Experiment) -> tuple[int, int]:
    return found.comparison.groups[0].params[STEPS], found.comparison.groups[0].params[TOPK]


def test_the_report_ranks_as_compare_does(stores):
    assert first(data.load(stores["plain"], "tuning")) == tuning_runs.fastest()
    assert first(data.load(stores["plain"], "tuning", by="accept_len")) == tuning_runs.highest_accept()
    found = data.load(stores["at_least_2"], "tuning")
    assert first(found) == tuning_runs.fastest_meeting(2.0)
    html = page.render(found)
    assert "subject to accept_len &gt;= 2" in html and html.count('<td class="text">accept_len &gt;= 2</td>') == sum(
        tuning_runs.accept_len(*p) < 2 for p in itertools.product(tuning_runs.STEPS, tuning_runs.TOPK))


def test_every_axis_legend_and_table_names_configurations_by_their_swept_values(stores):
    found = data.load(stores["plain"], "tuning")
    specs, _ = page._figures(found)
    spread = specs["spread-output_tok_s"]
    assert {t["name"] for t in spread["data"]} == LABELS  # ticks: without the shared `speculative_`
    assert {t["y"][0] for t in spread["data"]} == {f"num_steps={s} eagle_topk={k}"
                                                   for s, k in itertools.product(tuning_runs.STEPS, tuning_runs.TOPK)}
    assert spread["layout"]["yaxis"]["type"] == "category"
    by_steps = specs[f"by-{STEPS}"]
    assert {t["name"] for t in by_steps["data"]} == {f"{TOPK}={k}" for k in tuning_runs.TOPK}  # split by the other
    assert by_steps["layout"]["xaxis"]["categoryarray"] == [str(s) for s in tuning_runs.STEPS]
    assert {t["name"].rstrip(" ★") for t in specs["pareto"]["data"][:-1]} == LABELS
    over_time = [t["name"] for t in specs["headline-over-time"]["data"] if t["showlegend"]]
    assert sorted(over_time) == sorted(LABELS)  # one legend entry per configuration, its repeats grouped
    html = page.render(found)
    table = re.search(r'<table id="configurations">(.*?)</table>', html, re.S)[1]
    header = [h.replace("<wbr>", "") for h in re.findall(r"<th>(.*?)</th>", table)]
    assert header[:4] == ["#", "mark", STEPS, TOPK] and "tp_size" not in header and "n" not in header
    assert re.search(r'<p class="same">The same in every configuration: [^<]*tp_size = 8[^<]*n = 2 runs per '
                     r"configuration[^<]*requests = 16 \(every run\)", html)
    assert "run 1: speculative_num_steps=1 speculative_eagle_topk=1, sweep on local: succeeded" in html


def medians(steps: int, topk: int, metric: str) -> float:
    return statistics.median(tuning_runs.measures(steps, topk, r)[metric] for r in range(tuning_runs.REPEATS))


def test_the_pareto_figure_is_throughput_against_latency_with_its_front(stores):
    found = data.load(stores["plain"], "tuning")
    specs, front = page._figures(found)
    figure = specs["pareto"]
    assert figure["layout"]["xaxis"]["title"]["text"].startswith("itl_ms_p99 (lower is better")
    points = {p: (medians(*p, "itl_ms_p99"), medians(*p, "output_tok_s"))
              for p in itertools.product(tuning_runs.STEPS, tuning_runs.TOPK)}
    beaten = {p for p, (x, y) in points.items() if any(ox <= x and oy >= y and (ox, oy) != (x, y)
                                                       for ox, oy in points.values())}
    expected = set(points) - beaten
    assert 1 < len(expected) < len(points)  # a real trade: more than one choice, not every one
    assert {(g.params[STEPS], g.params[TOPK]) for g in found.comparison.groups if id(g) in front} == expected
    starred = {t["name"][:-2] for t in figure["data"] if t["name"].endswith(" ★")}
    assert starred == {f"{STEPS}={s} {TOPK}={k}" for s, k in expected}
    line = figure["data"][-1]
    assert line["name"] == "Pareto front" and len(line["x"]) == len(expected)
    # the objective's own latency is the axis when it names one
    specs, _ = page._figures(data.load(stores["median_itl"], "tuning"))
    assert specs["pareto"]["layout"]["xaxis"]["title"]["text"].startswith("itl_ms_p50 (lower is better")


def test_report_by_and_its_bad_metric(stores, tmp_path):
    out = tmp_path / "r.html"
    code, said, _, _ = orch_main(None, ["report", "tuning", "-o", str(out), "--by", "accept_len"], ["--db", stores["plain"].url], merge=True, strict=True)
    assert code == 0, said
    assert "maximize <b>accept_len</b>" in out.read_text()
    code, said, _, _ = orch_main(None, ["report", "tuning", "-o", str(out), "--by", "accept_lenn"], ["--db", stores["plain"].url], merge=True, strict=True)
    assert code == 2 and len(said.strip().splitlines()) == 1
    assert "--by accept_lenn: no succeeded run of 'tuning' has that metric; did you mean 'accept_len'?" in said
    assert report.write(stores["plain"], "tuning", out) == 18
