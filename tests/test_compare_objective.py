"""`orch compare` ranks by an objective: output throughput by default, the experiment's `objective:`
(a metric to maximize or minimize, subject to constraints) when it has one, `--by` over either. On a
steps x topk sweep (tuning_runs.py) whose fastest configuration is not the highest accept length."""

from __future__ import annotations

import itertools
import json

import pytest
import tuning_runs
from support.cli import orch_main

from orchestrator.core import compare, objective as objectives
from orchestrator.errors import SpecError

STEPS, TOPK = "speculative_num_steps", "speculative_eagle_topk"
AT_LEAST_2 = {"maximize": "output_tok_s", "subject_to": ["accept_len >= 2"]}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store per objective, filled once: none, throughput subject to accept length >= 2,
    a constraint no configuration meets, one on a metric no run records."""
    folder = tmp_path_factory.mktemp("objective")
    objectives_by_name = {"plain": None, "at_least_2": AT_LEAST_2,
                          "unmet": {"maximize": "output_tok_s", "subject_to": ["accept_len >= 9"]},
                          "unknown": {"minimize": "itl_ms_p90"}, "latency": {"minimize": "itl_ms_p50"}}
    return {name: tuning_runs.fill(folder / f"{name}.db", objective) for name, objective in objectives_by_name.items()}


def config(row: dict) -> tuple[int, int]:
    return row["params"][STEPS], row["params"][TOPK]


def compared(store, monkeypatch, capsys, *args) -> dict:
    code, out, err, _ = orch_main(None, ["compare", "tuning", "--json", *args], ["--db", store.url], strict=True)
    assert code == 0, err
    return json.loads(out)


def test_the_fixture_s_fastest_is_not_its_highest_accept_length():
    assert tuning_runs.fastest() != tuning_runs.highest_accept()
    assert tuning_runs.fastest_meeting(2.0) not in (tuning_runs.fastest(), tuning_runs.highest_accept())


def test_compare_names_the_fastest_by_default_and_the_highest_accept_with_by(stores, monkeypatch, capsys):
    data = compared(stores["plain"], monkeypatch, capsys)
    assert data["by"] == "output_tok_s" and data["lower_is_better"] is False
    assert data["objective"] == {"metric": "output_tok_s", "direction": "maximize", "from": "default", "subject_to": []}
    assert config(data["rows"][0]) == tuning_runs.fastest() and data["rows"][0]["mark"] == "best"
    medians = [r["metrics"]["output_tok_s"]["median"] for r in data["rows"]]
    assert medians == sorted(medians, reverse=True) and len(medians) == 9
    data = compared(stores["plain"], monkeypatch, capsys, "--by", "accept_len")
    assert data["by"] == "accept_len" and config(data["rows"][0]) == tuning_runs.highest_accept()
    assert data["objective"]["from"] == "--by"


def test_the_table_ranks_by_throughput_with_accept_length_beside_it(stores, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "220")
    code, out, _, _ = orch_main(None, ["compare", "tuning"], ["--db", stores["plain"].url], strict=True)
    steps, topk = tuning_runs.fastest()
    assert code == 0 and f"best by output_tok_s: {STEPS}={steps}, {TOPK}={topk} (runs" in out
    header = next(line for line in out.splitlines() if "output_tok_s" in line and STEPS in line)
    assert header.index("output_tok_s") < header.index("accept_len")


def test_the_experiment_objective_ranks_and_its_constraint_decides_the_best(stores, monkeypatch, capsys):
    data = compared(stores["at_least_2"], monkeypatch, capsys)
    assert data["by"] == "output_tok_s" and data["constraints"] == ["accept_len >= 2"]
    assert data["objective"]["from"] == "objective"
    assert config(data["rows"][0]) == tuning_runs.fastest_meeting(2.0) and data["rows"][0]["mark"] == "best"
    below = {p for p in itertools.product(tuning_runs.STEPS, tuning_runs.TOPK) if tuning_runs.accept_len(*p) < 2}
    assert {config(f) for f in data["failed"]} == below and tuning_runs.fastest() in below
    assert all(f["failed"] == ["accept_len >= 2"] for f in data["failed"])
    meeting = len(data["rows"]) - len(below)  # those meeting it first, then those failing, none marked
    assert all(not r["failed_constraints"] for r in data["rows"][:meeting])
    assert all(r["failed_constraints"] and r["mark"] is None for r in data["rows"][meeting:])
    # --by ranks by another metric under the same constraint
    data = compared(stores["at_least_2"], monkeypatch, capsys, "--by", "accept_len")
    assert data["constraints"] == ["accept_len >= 2"] and config(data["rows"][0]) == tuning_runs.highest_accept()


def test_a_minimized_objective_ranks_ascending(stores, monkeypatch, capsys):
    data = compared(stores["latency"], monkeypatch, capsys)
    assert data["by"] == "itl_ms_p50" and data["lower_is_better"] is True
    medians = [r["metrics"]["itl_ms_p50"]["median"] for r in data["rows"]]
    assert medians == sorted(medians) and config(data["rows"][0]) == tuning_runs.fastest()  # at one concurrency


def test_when_no_configuration_meets_the_constraints_none_is_best(stores, monkeypatch, capsys):
    data = compared(stores["unmet"], monkeypatch, capsys)
    assert all(r["mark"] is None for r in data["rows"]) and len(data["failed"]) == 9
    code, out, _, _ = orch_main(None, ["compare", "tuning", "--csv"], ["--db", stores["unmet"].url], strict=True)
    assert code == 0 and out.splitlines()[1].split(",")[0] == "" and "fails" in out.splitlines()[0]
    code, out, _, _ = orch_main(None, ["compare", "tuning"], ["--db", stores["unmet"].url], strict=True)
    assert code == 0 and "no configuration meets accept_len >= 9: none is the best" in out


@pytest.mark.parametrize(("name", "args", "message"), [
    ("unknown", (), "'tuning' objective (minimize): objective metric 'itl_ms_p90' is not a metric its succeeded runs "
                    "have; did you mean 'itl_ms_p99'?"),
    ("plain", ("--by", "output_toks"), "--by output_toks: no succeeded run of 'tuning' has that metric; did you mean "
                                       "'output_tok_s'?"),
])
def test_an_objective_on_a_metric_no_run_has_is_one_line_exit_2(stores, monkeypatch, capsys, name, args, message):
    code, _, err, _ = orch_main(None, ["compare", "tuning", *args], ["--db", stores[name].url], strict=True)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    if name == "unknown":
        assert err.strip().endswith("rank by another with --by")


def test_a_stored_objective_is_read_as_the_file_s_was():
    runs = [{"id": 7, "spec": {"objective": {"maximize": "output_tok_s", "subject_to": "accept_len > 1.5"}},
             "metrics": {}}]
    found = compare.objective_of(runs)
    assert found == objectives.Objective("output_tok_s", False, (objectives.Constraint("accept_len", ">", 1.5),),
                                         "objective")
    with pytest.raises(SpecError, match=r"objective: of run 7's experiment: constraint 'accept_len ~ 2'"):
        compare.objective_of([{"id": 7, "spec": {"objective": {"maximize": "x", "subject_to": ["accept_len ~ 2"]}},
                               "metrics": {}}])


def test_an_objective_written_in_the_file_is_checked_stored_and_ranked_by(project):
    """The experiment file's `objective:` is read at load, passes `orch check`'s metric names, and
    the copy a run stores (its spec) is the objective compare ranks by."""
    from conftest import ROOT
    from orchestrator.core import plancheck, spec as specs

    path = project / "experiments" / "tuning.yaml"
    path.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text()
                    + 'objective:\n  minimize: itl_ms_p99\n  subject_to: ["accept_len >= 2", "output_tok_s > 100"]\n')
    loaded = specs.load(path)
    assert loaded.objective == objectives.Objective(
        "itl_ms_p99", True, (objectives.Constraint("accept_len", ">=", 2.0),
                             objectives.Constraint("output_tok_s", ">", 100.0)), "objective")
    plancheck.check(loaded, specs.expand(loaded), [])
    assert compare.objective_of([{"id": 1, "spec": loaded.raw, "metrics": {}}]) == loaded.objective
    assert compare.objective_of([{"id": 1, "spec": loaded.raw, "metrics": {}}], "accept_len") == objectives.Objective(
        "accept_len", False, loaded.objective.subject_to, "--by")
