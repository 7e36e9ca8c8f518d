"""Benchmark datasets from local files (core/datasets.py): each format as published, a seeded draw,
and a bad file as one line naming file:line, refused when the experiment loads (before any host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.specs import experiment
from orchestrator.core import datasets, spec as specs
from orchestrator.errors import SpecError

DATA = Path(__file__).parent / "fixtures" / "datasets"


@pytest.mark.parametrize("name, fmt, first", [
    ("mt_bench_question.jsonl", "mt-bench", ("Write a short note inviting the team to a draft-model review.",
                                             "Now rewrite the note as a haiku.")),
    ("sharegpt.json", "sharegpt", ("How do I pick a batch size for serving?",)),
    ("gsm8k.jsonl", "gsm8k", ("A server answers 30 requests a minute. How many does it answer in 2.5 minutes?",)),
    ("humaneval.jsonl", "humaneval", ('def mean(xs: list[float]) -> float:\n    """The arithmetic mean of xs."""\n',)),
    ("prompts.jsonl", "jsonl", ("Explain a KV cache in one sentence.",)),
])
def test_each_format_reads_its_published_shape(name, fmt, first):
    found = datasets.read(str(DATA / name), fmt)
    assert found[0] == first and all(isinstance(t, str) for c in found for t in c)


def test_sharegpt_takes_the_first_human_turn_after_a_system_one():
    assert datasets.read(str(DATA / "sharegpt.json"), "sharegpt")[1] == ("Name three GPU memory costs of a long context.",)


def test_a_seeded_draw_is_the_same_every_time_and_differs_by_seed():
    path = str(DATA / "mt_bench_question.jsonl")
    one, again = (datasets.conversations(path, "mt-bench", 2, seed=7) for _ in range(2))
    assert one == again and len(one) == 2 and len(set(one)) == 2
    seeds = {datasets.conversations(path, "mt-bench", 2, seed=s) for s in range(10)}
    assert len(seeds) > 1
    assert datasets.conversations(path, "mt-bench", None, 0) == datasets.read(path, "mt-bench")  # all, file order
    with pytest.raises(SpecError, match=r"num_prompts 4 but the dataset has 3"):
        datasets.conversations(path, "mt-bench", 4, 0)


@pytest.mark.parametrize("fmt, text, says", [
    ("mt-bench", '{"turns": ["a", "b"]}\n\n{"turns": "one"}\n', ":3: expected an object with `turns`"),
    ("gsm8k", '{"question": "q"}\n{"questio": "q"}\n', ":2: expected an object with a string `question`"),
    ("humaneval", '{"prompt": "def f():"}\n{"prompt": \n', ":2: not JSON"),
    ("sharegpt", '[\n  {"conversations": [{"from": "human", "value": "x"}]},\n  {"conversations": []}\n]\n',
     ":3: no turn `from: human`"),
    ("sharegpt", '[\n  {"conversations": [{"from": "human", "value": "x"}]}\n  {"x": 1}\n]\n', ":3: expected `,` or `]`"),
    ("sharegpt", '[\n  {"conversations": [\n    {"from": "human", "value": "x",}]}]\n', ":3: not JSON"),
    ("jsonl", "\n\n", ": no prompts in the dataset"),
])
def test_a_malformed_file_is_one_line_naming_file_and_line(tmp_path, fmt, text, says):
    path = tmp_path / "bad.data"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        datasets.read(str(path), fmt)
    assert str(caught.value).startswith(str(path)) and says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_experiment_reads_its_dataset_when_it_loads(project):
    (project / "experiments" / "q.jsonl").write_text((DATA / "mt_bench_question.jsonl").read_text())
    spec = specs.load(experiment(project, "", "dataset: q.jsonl, format: mt-bench, num_prompts: 2, seed: 3, "
                                           "endpoint: chat, top_p: 0.9"))
    load = spec.workload
    assert (load.dataset, load.format, load.num_prompts, load.seed, load.endpoint, load.top_p) == (
        str(project / "experiments" / "q.jsonl"), "mt-bench", 2, 3, "chat", 0.9)


@pytest.mark.parametrize("workload, says", [
    ("dataset: missing.jsonl, format: gsm8k", "dataset file"),
    ("dataset: q.jsonl, format: alpaca", "`format` must be one of jsonl, sharegpt, mt-bench, gsm8k, humaneval"),
    ("dataset: q.jsonl, format: gsm8k", "q.jsonl:1: expected an object with a string `question`"),
    ("dataset: q.jsonl, format: mt-bench, requests: 4", "`dataset` and `requests` both say what to send"),
    ("dataset: q.jsonl, format: mt-bench, num_prompts: 0", "workload.num_prompts must be a whole number >= 1"),
    ("endpoint: completions", "`endpoint` must be one of generate, chat"),
    ("top_p: 1.5", "`top_p` must be at most 1"),
])
def test_bad_workload_dataset_keys_are_one_line_errors(project, workload, says):
    (project / "experiments" / "q.jsonl").write_text((DATA / "mt_bench_question.jsonl").read_text())
    with pytest.raises(SpecError) as caught:
        specs.load(experiment(project, "", workload))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_matrix_drawing_more_prompts_than_the_dataset_holds_is_refused_when_planned(project):
    (project / "experiments" / "q.jsonl").write_text((DATA / "gsm8k.jsonl").read_text())
    spec = specs.load(experiment(project, "matrix: {workload.num_prompts: [1, 3]}\n", "dataset: q.jsonl, format: gsm8k"))
    with pytest.raises(SpecError, match=r"q.jsonl: num_prompts 3 but the dataset has 2; lower num_prompts"):
        specs.expand(spec, (), ("fixed",))
    assert [p.workload.num_prompts for p in specs.expand(spec, ("workload.num_prompts=2",), ("fixed",))] == [2, 2]


@pytest.mark.slow  # a whole orch process (~2 s idle, more on a busy machine); the loads above are the quick cases
def test_orch_run_with_a_bad_dataset_line_stops_before_any_host(project):
    from support.cli import orch

    (project / "experiments" / "q.jsonl").write_text('{"turns": ["a", "b"]}\n{"turns": [1]}\n')
    done = orch(project, "run", str(experiment(project, "", "dataset: q.jsonl, format: mt-bench")))
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.endswith("q.jsonl:2: expected an object with `turns`, a list of strings (mt-bench format)"), line
    assert not (project / "host").exists()
