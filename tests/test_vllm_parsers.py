"""vLLM log lines, /metrics text and crash messages (real formats, see tests/fixtures/vllm/README.md)."""

from pathlib import Path

import pytest

from orchestrator.engines.vllm import diagnosis, logs, metrics

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


def test_spec_lines_of_0_10_1_1():
    report = logs.parse_log((FIXTURES / "spec_0.10.1.1.log").read_bytes(), r"\[EAGLE3-DEBUG\]")
    spec = [p for p in report.series if p.kind == logs.SPEC_SERIES]
    assert [p.values["mean_accept_len"] for p in spec] == [3.08, 1.0]
    assert spec[0].values["accepted"] == 1234 and spec[0].values["drafted"] == 1782
    assert spec[0].values["draft_accept_rate"] == 69.2 and spec[0].values["per_position"] == (0.853, 0.692, 0.536)
    assert spec[0].time == "08-20 10:00:20" and spec[0].values["where"] == "metrics.py:87"
    throughput = [p for p in report.series if p.kind == logs.THROUGHPUT_SERIES]
    assert [p.values["generation_throughput"] for p in throughput] == [45.6, 40.1]
    assert throughput[1].values["waiting"] == 1 and throughput[1].values["prefix_cache_hit_rate"] == 12.5
    assert report.ready and report.launch_args.startswith("{'model': '/ckpt/llama-target'")
    # weighted by drafts (drafted / 3 per-position rates), as /metrics is: not the mean of 3.08 and 1.00
    assert report.measures[0].value == pytest.approx(1 + (1234 + 0) / (1782 / 3 + 300 / 3))
    assert report.debug_lines[0].fields == {"shape": "torch.Size([1, 192])", "fc_in": "192"}
    assert report.diagnosis is None


def test_spec_lines_of_0_33_0():
    report = logs.parse_log((FIXTURES / "spec_0.33.0.log").read_bytes(), r"\[EAGLE3-DEBUG\]")
    spec = [p for p in report.series if p.kind == logs.SPEC_SERIES][0].values
    assert spec["mean_accept_len"] == 2.9 and spec["draft_accept_rate"] == 63.5
    assert spec["accepted_throughput"] == 57.3 and spec["per_position"] == (0.82, 0.63, 0.45)
    throughput = [p for p in report.series if p.kind == logs.THROUGHPUT_SERIES][0].values
    assert throughput["running"] == 4 and throughput["kv_cache_usage"] == 2.0 and throughput["engine"] == 0
    assert report.debug_lines == ()


def test_not_ready_without_uvicorns_line():
    assert not logs.is_ready(b"(APIServer pid=1) INFO 08-20 10:00:09 [launcher.py:36] Available routes are:\n")


def test_metrics_counters_and_deltas():
    after = metrics.parse((FIXTURES / "metrics.txt").read_text())
    assert (after.drafts, after.draft_tokens, after.accepted) == (600, 1800, 1140)
    assert after.accept_len() == pytest.approx(1 + 1140 / 600)
    assert after.per_position_rates() == pytest.approx((0.8, 0.65, 0.45))
    before = metrics.parse((FIXTURES / "metrics.txt").read_text().replace("600.0", "100.0").replace("1140.0", "140.0"))
    assert after.minus(before).accept_len() == pytest.approx(1 + 1000 / 500)


def test_metrics_without_speculation():
    found = metrics.parse('vllm:num_requests_running{engine="0",model_name="m"} 0.0\n')
    assert not found.found and found.accept_len() is None


# One real message per rule (the file:line of each is in diagnosis.py's docstring).
CRASHES = {
    "cuda-oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capacity of 79.19 GiB",
    "kv-cache-too-small": "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    "port-in-use": "OSError: [Errno 98] Address already in use",
    "max-model-len": "ValueError: User-specified max_model_len (262144) is greater than the derived max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json). This may lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "tp-too-large": "ValueError: World size (8) is larger than the number of available GPUs (1) in this node. If this is intentional and you are using:",
    "spec-method-unknown": "  Input should be 'ngram', 'eagle', 'eagle3', 'medusa', 'mlp_speculator', 'draft_model' or 'deepseek_mtp' [type=literal_error, input_value='eagle-3', input_type=str]",
    "eagle3-target-unsupported": "RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested",
    "arch-unsupported": "ValueError: Model architectures ['EagleLlamaForCausalLMEagle3'] are not supported for now. Supported architectures: dict_keys([...])",
    "draft-weights": "AssertionError: Attempted to load weight (torch.Size([64, 128])) into parameter (torch.Size([64, 192]))",
    "bad-arguments": "api_server.py: error: unrecognized arguments: --speculative-algorithm EAGLE3",
    "engine-core-failed": "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_0': 1}",
}


@pytest.mark.parametrize("kind", sorted(CRASHES))
def test_each_crash_is_named(kind):
    found = logs.diagnose_bytes(f"(APIServer pid=9) INFO 08-20 10:00:00 [x.py:1] starting\n{CRASHES[kind]}\n".encode())
    assert found is not None and found.kind == kind and found.evidence[0] == CRASHES[kind].strip()


def test_method_eagle_with_an_eagle3_draft_says_use_eagle3():
    found = diagnosis.diagnose(CRASHES["arch-unsupported"])
    assert 'use "method": "eagle3"' in found.summary


def test_healthy_logs_and_the_internal_port_retry_are_no_failure():
    healthy = (FIXTURES / "spec_0.10.1.1.log").read_bytes() + (FIXTURES / "spec_0.33.0.log").read_bytes()
    retry = b"(EngineCore_0 pid=5) WARNING 08-20 10:00:01 [parallel.py:191] Address already in use. Retrying with a new port.\n"
    assert logs.diagnose_bytes(healthy + retry) is None


def test_big_log_is_read_without_a_line_loop():
    import time

    line = b"(APIServer pid=4101) INFO:     127.0.0.1:5 - \"POST /v1/completions HTTP/1.1\" 200 OK\n"
    big = line * 400_000 + (FIXTURES / "spec_0.33.0.log").read_bytes()
    started = time.perf_counter()
    report = logs.parse_log(big, r"\[EAGLE3-DEBUG\]")
    assert time.perf_counter() - started < 2.0
    assert len([p for p in report.series if p.kind == logs.SPEC_SERIES]) == 1
