"""What vLLM 0.33.0 prints, with the file:line its logger names (the real release's)."""

SPEC_WHERE = "metrics.py:120"  # vllm/v1/spec_decode/metrics.py
STATS_WHERE = "loggers.py:335"  # vllm/v1/metrics/loggers.py
ARGS_WHERE = "startup.py:96"  # vllm/entrypoints/common/startup.py
VERSION_WHERE, VERSION_LINE = "startup.py:18", "vLLM server version %s"
START_WHERE = "entry.py:139"  # vllm/entrypoints/launchers/api_server/entry.py
ROUTES_WHERE = "launcher.py:188"  # vllm/entrypoints/launchers/launcher.py
ROUTE_WHERE = "launcher.py:196"
ENGINE_PROCESS = "EngineCore"
AUTO_FIT_MAX_MODEL_LEN = True  # `--max-model-len -1` auto-fits: the derived length (vllm/config/model.py:2642)
# --enable-chunked-prefill as asked, True when absent (engine/arg_utils.py:3047); printed as
# `enable_chunked_prefill` (config/vllm.py:2840)
CHUNKED_PREFILL_FORCED, CHUNKED_PREFILL_FIELD = False, "enable_chunked_prefill"


def start_line(host: str, port: int) -> str:
    return f"Starting vLLM server on http://{host}:{port}"


def spec_line(rate: float, mean: float, accepted: int, drafted: int, rates: str, accepted_tps: float, drafted_tps: float) -> str:
    return (f"SpecDecoding metrics: Mean acceptance length: {mean:.2f}, Accepted throughput: {accepted_tps:.2f} "
            f"tokens/s, Drafted throughput: {drafted_tps:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: "
            f"{drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {rate:.1f}%")


def stats_line(prompt_tps: float, gen_tps: float, running: int, waiting: int, kv: float, hit: float) -> str:
    return (f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: {gen_tps:.1f} "
            f"tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%, "
            f"Prefix cache hit rate: {hit:.1f}%")


def too_many_gpus(world: int, gpus: int) -> str:
    """vllm/config/parallel.py:1072"""
    return (f"World size ({world}) is larger than the number of available GPUs ({gpus}) in this node. If this is "
            "intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, "
            "set '--nnodes' appropriately.")
