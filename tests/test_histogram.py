"""The correct-drafts histogram of 0.5.23's meta_info: read per request, summed per run, stored, shown."""

from __future__ import annotations

import json

from support.cli import orch

from orchestrator import engines
from orchestrator.engines.base import LogReport, RequestResult, ServerState, WorkloadResult
from orchestrator.engines.sglang import engine as sglang
from orchestrator.run import collect
from orchestrator.store.database import Run, Store

NO_STATE = ServerState(None, None)
NO_LOG = LogReport((), (), None, False, None)


def _request(histogram=()) -> RequestResult:
    return RequestResult(prompt_tokens=5, completion_tokens=10, latency=0.1, counts={"spec_verify_ct": 4},
                         histogram=tuple(histogram))


def _measures(*requests):
    return engines.get("sglang").measures(WorkloadResult(requests, 1.0), NO_STATE, NO_STATE, NO_LOG)


def test_a_requests_histogram_is_read_from_either_releases_key():
    assert sglang.request_histogram({"spec_correct_drafts_histogram": [3, 0, 1, 6]}) == (3, 0, 1, 6)  # 0.5.23
    assert sglang.request_histogram({"spec_accept_histogram": [2, 2]}) == (2, 2)  # 0.5.9
    assert sglang.request_histogram({"spec_verify_ct": 4}) == ()  # 0.4.10: none
    assert sglang.request_histogram({"spec_correct_drafts_histogram": [1, "2"]}) == ()
    assert sglang.request_histogram({"spec_correct_drafts_histogram": [True, 1]}) == ()


def test_the_workloads_histogram_is_the_requests_added_bin_by_bin():
    [histogram] = _measures(_request([3, 0, 1, 6]), _request([1, 2]), _request()).histograms
    assert histogram.counts == (4, 2, 1, 6) and histogram.source == "meta_info"
    assert _measures(_request(), _request()).histograms == ()
    assert _measures(_request()).values[0].value == 10 / 4  # the headline: tokens per verify step


def test_the_histogram_is_stored_with_the_run_and_shown(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    run = Run(uid="r1-x", experiment="e", variant="v", host="h")
    store.add(run)
    collect.record(store, run, {}, _measures(_request([1, 0, 1, 8]), _request([0, 1, 1])))
    other = Run(uid="r2-x", experiment="e", variant="w", host="h")
    store.add(other)
    collect.record(store, other, {}, _measures(_request()))
    record = json.loads(orch(tmp_path, "show", "r1", "--json", timeout=120, inventory=False).stdout)
    assert record["histograms"]["correct_drafts_histogram"]["counts"] == [1, 1, 2, 8]
    assert record["histograms"]["correct_drafts_histogram"]["source"] == "meta_info"
    shown = orch(tmp_path, "show", "r1", timeout=120, inventory=False).stdout
    assert "correct_drafts_histogram" in shown and "0: 1 (8.3%)" in shown and "3: 8 (66.7%)" in shown
    assert "12 verify steps; mean 2.42 draft tokens accepted per step, accept length 3.42" in shown
    assert json.loads(orch(tmp_path, "show", "r2", "--json", timeout=120, inventory=False).stdout)["histograms"] == {}
    assert "correct_drafts_histogram" not in orch(tmp_path, "show", "r2", timeout=120, inventory=False).stdout
