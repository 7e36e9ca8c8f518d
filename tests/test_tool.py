"""The engine's own benchmark tools as the workload (`workload: {tool: sglang.bench_serving, args:
{...}}`): the module path and the arguments read from the real wheels' files (installed --no-deps,
never imported), the real tool's result file read into metrics, the experiment file's keys, and a
bad argument stopping `orch run` before anything on the host changes.

The real tool against the rehearsal server is `test_tool_real.py` (slow: a venv with its imports)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.core import plancheck, spec as specs
from orchestrator.engines.base import HEADLINE
from orchestrator.engines.sglang import flags, tools
from orchestrator.errors import SpecError
from support.cli import orch
from support.files import snapshot
from support.specs import tool_experiment
from wheels import package_dir

FIXTURES = Path(__file__).parent / "fixtures" / "tool"


def tool_flags(folder: Path, tool: tools.Tool) -> tuple[str, flags.FlagSet]:
    """The module the release at `folder` gives the tool, and its parser's flags, as the host side reads them."""
    present = {f for f in tools.candidates() if (folder / f).is_file()}
    module, file = tools.module_of(tool, present, folder.name)
    sources = {str(p.relative_to(folder)): p.read_text() for pattern in (file, *tool.sources) for p in folder.glob(pattern)}
    return module, flags.scan(sources, "test")


@pytest.mark.parametrize("version, module", [("0.4.10.post2", "sglang.bench_serving"), ("0.5.9", "sglang.bench_serving"),
                                             ("0.5.23", "sglang.benchmark.serving")])
def test_bench_serving_module_and_args_from_the_real_wheels(sglang_python, version, module):
    found_module, found = tool_flags(package_dir(sglang_python(version)), tools.find("sglang.bench_serving"))
    assert found_module == module
    serving = tools.find("sglang.bench_serving")
    words, warnings = tools.argv(serving, {"dataset-name": "random-ids", "num_prompts": 4, "disable_tqdm": True,
                                           "disable-stream": False}, 30001, "/r/bench.jsonl", found, module)
    assert words == ("--backend", "sglang", "--dataset-name", "random-ids", "--num-prompts", "4", "--disable-tqdm",
                     "--host", "127.0.0.1", "--port", "30001", "--output-file", "/r/bench.jsonl")
    assert not warnings
    with pytest.raises(SpecError, match=r"has no argument --num-promts; closest: --num-prompts"):
        tools.argv(serving, {"num_promts": 4}, 30001, "/r/b", found, module)
    with pytest.raises(SpecError, match="--port is orch's to set"):
        tools.argv(serving, {"port": 1}, 30001, "/r/b", found, module)


@pytest.mark.parametrize("version, module", [("0.5.9", "sglang.bench_one_batch_server"),
                                             ("0.5.23", "sglang.benchmark.one_batch_server")])
def test_one_batch_server_takes_bench_and_server_flags(sglang_python, version, module):
    one_batch = tools.find("sglang.bench_one_batch_server")
    found_module, found = tool_flags(package_dir(sglang_python(version)), one_batch)
    assert found_module == module
    words, _ = tools.argv(one_batch, {"batch-size": [1, 8], "input-len": 64, "model-path": "None"}, 30002, "/r/b", found,
                          module)
    assert words == ("--batch-size", "1", "8", "--input-len", "64", "--model-path", "None",
                     "--base-url", "http://127.0.0.1:30002", "--result-filename", "/r/b")
    with pytest.raises(SpecError, match="closest: --batch-size"):
        tools.argv(one_batch, {"batch-sise": 1}, 30002, "/r/b", found, module)


def test_a_release_without_the_tool_and_an_unknown_tool_are_errors():
    with pytest.raises(SpecError, match=r"SGLang 0.5.9 on the host has no such tool \(none of benchmark/serving.py, "
                                        r"bench_serving.py in its package\)"):
        tools.module_of(tools.find("sglang.bench_serving"), set(), "0.5.9")
    with pytest.raises(SpecError, match="SGLang has no such benchmark tool; tools: sglang.bench_serving, "
                                        "sglang.bench_one_batch_server"):
        tools.find("sglang.bench_serve")
    assert tools.find("sglang.benchmark.serving") is tools.find("bench_serving")


def test_the_real_tools_result_file_becomes_metrics():
    """A result line the real 0.4.10.post2 bench_serving wrote against the rehearsal server."""
    found = tools.measures(tools.find("sglang.bench_serving"), "sglang.bench_serving",
                           (FIXTURES / "bench_serving-0.4.10.post2.jsonl").read_bytes())
    by_name = {m.name: m.value for m in found}
    assert found[0].name == HEADLINE and found[0].value == pytest.approx(2.936, abs=1e-3)
    assert by_name["output_tok_s"] == by_name["output_throughput"] > 0
    for name in ("median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p95_itl_ms", "p99_itl_ms", "median_e2e_latency_ms",
                 "request_throughput", "accept_length", "completed", "duration"):
        assert by_name[name] is not None and by_name[name] >= 0, name
    assert "sharegpt_output_len" not in by_name and "backend" not in by_name  # null and text fields are not metrics


def test_one_batch_server_lines_are_named_by_what_differs():
    """Two lines as 0.5.23's BenchOneCaseResult.dump_to_jsonl writes them (one per batch size)."""
    line = ('{{"run_name": "default", "batch_size": {bs}, "input_len": 64, "output_len": 16, "latency": 0.5, '
            '"input_throughput": 1.0, "output_throughput": {tp}, "overall_throughput": 3.0, "last_ttft": 0.1, '
            '"last_gen_throughput": 2.0, "acc_length": 2.5, "cache_hit_rate": null}}\n')
    found = tools.measures(tools.find("sglang.bench_one_batch_server"), "sglang.bench_one_batch_server",
                           (line.format(bs=1, tp=10.0) + line.format(bs=8, tp=70.0)).encode())
    by_name = {m.name: m.value for m in found}
    assert by_name["output_throughput@batch_size=1"] == 10.0 and by_name["output_throughput@batch_size=8"] == 70.0
    assert by_name["acc_length@batch_size=8"] == 2.5
    assert HEADLINE not in by_name  # one accept length per batch size: none is the run's
    single = tools.measures(tools.find("sglang.bench_one_batch_server"), "m", line.format(bs=1, tp=10.0).encode())
    assert single[0].name == HEADLINE and single[0].value == 2.5
    with pytest.raises(SpecError, match="result line 2: not JSON"):
        tools.measures(tools.find("sglang.bench_serving"), "m", b'{"a": 1}\n{oops\n')


def _spec(project: Path, workload: str) -> Path:
    path = project / "experiments" / "t.yaml"
    path.write_text(f"name: t\nhosts: [local]\ntemplate: ../templates/sglang_launch.sh.j2\nworkload:\n{workload}")
    return path


def test_experiment_file_tool_keys(project):
    loaded = specs.load(_spec(project, "  tool: sglang.bench_serving\n  args:\n    num-prompts: 8\n"
                                       "    disable-tqdm: true\n    batch-size: [1, 8]\n"))
    assert loaded.workload.tool == "sglang.bench_serving"
    assert loaded.workload.args == {"num-prompts": 8, "disable-tqdm": True, "batch-size": [1, 8]}
    assert specs.load(_spec(project, "  requests: 2\n")).workload.tool is None
    for text, message in [
        ("  args: {num-prompts: 8}\n", r"t.yaml:5: `args` are a benchmark tool's; add `tool:`"),
        ("  tool: sglang.bench_serving\n  prompts: p.jsonl\n", "`prompts` is orch's own workload"),
        ("  tool: sglang.bench_serving\n  args: {num-prompts: {a: 1}}\n", r"t.yaml:6: args 'num-prompts': expected"),
        ("  tool: [a]\n", "`tool` must be the name of one of the engine's benchmark tools"),
    ]:
        (project / "experiments" / "p.jsonl").write_text('"hi"\n')
        with pytest.raises(SpecError, match=message):
            specs.load(_spec(project, text))


def test_a_bad_tool_arg_stops_the_run_before_the_host_changes(project, sglang_python):
    """The rehearsal's 0.5.9 tree has no bench_serving: `orch check` says so; with the real 0.5.9 file
    laid in, `orch run` stops at the misspelt argument (did-you-mean), the host as it was."""
    spec = project / "experiments" / "tool.yaml"
    spec.write_text(tool_experiment())
    checked = orch(project, "check", str(spec))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "SGLang 0.5.9 on the host has no such tool" in checked.stdout
    shutil.copy(package_dir(sglang_python("0.5.9")) / "bench_serving.py", project / "host" / "rehearsal" / "sglang")
    before = snapshot(project / "host")
    done = orch(project, "run", str(spec))
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("tool.yaml: local: workload.args: sglang.bench_serving of SGLang 0.5.9 has no argument --num-promts; "
            "closest: --num-prompts") in " ".join(done.stdout.split())
    assert "Traceback" not in done.stdout + done.stderr
    after = snapshot(project / "host")
    assert {k: v for k, v in after.items() if not k.startswith("runs/")} == before
    assert not any(k.endswith(("server.log", "tool.log")) for k in after)  # no launch, no tool run


def test_expectations_may_name_the_tools_metrics(project):
    """The tool names its metrics only once it has run: `expect` keys are not held to orch's own list."""
    variants = 'variants:\n  v:\n    expect: {median_ttft_ms: "< 100"}\n'
    tooled = _spec(project, "  tool: sglang.bench_serving\n" + variants)
    loaded = specs.load(tooled)
    plancheck.check(loaded, specs.expand(loaded), [])
    plain = specs.load(_spec(project, "  requests: 2\n" + variants))
    with pytest.raises(SpecError, match="expect key 'median_ttft_ms' of variant 'v' is not a metric a run records"):
        plancheck.check(plain, specs.expand(plain), [])
