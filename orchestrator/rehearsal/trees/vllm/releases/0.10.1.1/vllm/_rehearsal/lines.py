"""What vLLM 0.10.1.1 prints, with the file:line its logger names (the real release's)."""

SPEC_WHERE = "metrics.py:87"  # vllm/v1/spec_decode/metrics.py
STATS_WHERE = "loggers.py:123"  # vllm/v1/metrics/loggers.py
ARGS_WHERE = "utils.py:326"  # vllm/entrypoints/utils.py
VERSION_WHERE, VERSION_LINE = "api_server.py:1805", "vLLM API server version %s"
START_WHERE = "api_server.py:1880"
ROUTES_WHERE = "launcher.py:36"  # vllm/entrypoints/launcher.py
ROUTE_WHERE = "launcher.py:44"
ENGINE_PROCESS = "EngineCore_0"
AUTO_FIT_MAX_MODEL_LEN = False  # only an absent --max-model-len takes the derived length (vllm/config/__init__.py:2931)
# V1 always chunks prefills, whatever --enable-chunked-prefill asked, and says nothing of it
# (engine/arg_utils.py:1592 `_set_default_args_v1`); VllmConfig.__str__ prints it as `chunked_prefill_enabled`
CHUNKED_PREFILL_FORCED, CHUNKED_PREFILL_FIELD = True, "chunked_prefill_enabled"  # config/__init__.py:3851


def start_line(host: str, port: int) -> str:
    return f"Starting vLLM API server 0 on http://{host}:{port}"


def spec_line(rate: float, mean: float, accepted: int, drafted: int, rates: str, accepted_tps: float, drafted_tps: float) -> str:
    return (f"SpecDecoding metrics: Draft acceptance rate: {rate:.1f}%, Mean acceptance length: {mean:.2f}, "
            f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}")


def stats_line(prompt_tps: float, gen_tps: float, running: int, waiting: int, kv: float, hit: float) -> str:
    return (f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: {gen_tps:.1f} "
            f"tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%, "
            f"Prefix cache hit rate: {hit:.1f}%")


def too_many_gpus(world: int, gpus: int) -> str:
    """0.10.1.1 falls back to Ray when the world size is above the GPU count (vllm/config/parallel.py:315)."""
    return ("Unable to load Ray: No module named 'ray'. Ray is required for multi-node inference, please install "
            "Ray with `pip install ray`.")
