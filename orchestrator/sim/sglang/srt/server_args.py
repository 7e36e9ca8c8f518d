"""The server arguments (rehearsal): SGLang's flag names and defaults in a plain argparse parser.

Every option string is a literal `parser.add_argument("--flag", ...)` call, so a static scan of
this file finds them all. `allow_abbrev` keeps argparse's default (True), like SGLang: unique
prefixes work and ambiguous ones are usage errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import sys
from pathlib import Path
from typing import List, Optional

logger = logging.getLogger(__name__)

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


class DeprecatedStoreTrueAction(argparse.Action):
    """store_true that prints a deprecation notice when used."""

    def __init__(self, option_strings, dest, default=False, required=False, help=None, new_hint=""):
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, required=required, help=help)
        self.new_hint = new_hint

    def __call__(self, parser, namespace, values, option_string=None):
        from sglang.srt.utils import is_old_style

        if not is_old_style():  # deprecated from 0.5.14
            print(f"'{option_string}' is deprecated and will be removed in a future release. {self.new_hint}", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, True)


@dataclasses.dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str
    tokenizer_path: Optional[str] = None
    tokenizer_mode: str = "auto"
    tokenizer_worker_num: int = 1
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    model_loader_extra_config: str = "{}"
    trust_remote_code: bool = False
    context_length: Optional[int] = None
    is_embedding: bool = False
    enable_multimodal: Optional[bool] = None
    revision: Optional[str] = None
    model_impl: str = "auto"
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    served_model_name: Optional[str] = None
    chat_template: Optional[str] = None
    completion_template: Optional[str] = None
    weight_version: str = "default"

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    warmups: Optional[str] = None
    nccl_port: Optional[int] = None
    fastapi_root_path: str = ""

    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_queued_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    page_size: Optional[int] = None
    disable_radix_cache: bool = False
    cpu_offload_gb: int = 0
    num_continuous_decode_steps: int = 1

    # Runtime
    device: Optional[str] = None
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    stream_interval: int = 1
    stream_output: bool = False
    random_seed: Optional[int] = None
    watchdog_timeout: float = 300
    dist_timeout: Optional[int] = None
    download_dir: Optional[str] = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    sleep_on_idle: bool = False

    # Logging and metrics
    log_level: str = "info"
    log_level_http: Optional[str] = None
    log_requests: bool = False
    log_requests_level: int = 2
    crash_dump_folder: Optional[str] = None
    show_time_cost: bool = False
    enable_metrics: bool = False
    enable_metrics_for_all_schedulers: bool = False
    collect_tokens_histogram: bool = False
    decode_log_interval: int = 40
    enable_request_time_stats_logging: bool = False
    enable_mfu_metrics: bool = False

    # API
    api_key: Optional[str] = None
    file_storage_path: str = "sglang_storage"
    enable_cache_report: bool = False
    reasoning_parser: Optional[str] = None
    tool_call_parser: Optional[str] = None

    # Data parallelism and multi-node
    load_balance_method: str = "round_robin"
    dist_init_addr: Optional[str] = None
    nnodes: int = 1
    node_rank: int = 0

    # Kernel backends
    attention_backend: Optional[str] = None
    prefill_attention_backend: Optional[str] = None
    decode_attention_backend: Optional[str] = None
    sampling_backend: Optional[str] = None
    grammar_backend: Optional[str] = None
    mm_attention_backend: Optional[str] = None
    moe_runner_backend: str = "auto"
    moe_a2a_backend: str = "none"

    # Speculative decoding
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_draft_model_revision: Optional[str] = None
    speculative_draft_load_format: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    speculative_token_map: Optional[str] = None
    speculative_attention_mode: str = "prefill"
    speculative_draft_attention_backend: Optional[str] = None
    speculative_moe_runner_backend: Optional[str] = None
    speculative_draft_model_quantization: Optional[str] = None

    # Optimizations
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_max_bs_prefill: Optional[int] = None
    cuda_graph_bs: Optional[List[int]] = None
    cuda_graph_backend_decode: str = "auto"
    cuda_graph_backend_prefill: str = "auto"
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    enable_profile_cuda_graph: bool = False
    disable_custom_all_reduce: bool = False
    enable_mscclpp: bool = False
    enable_nccl_nvls: bool = False
    enable_symm_mem: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False
    enable_two_batch_overlap: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    torchao_config: str = ""
    enable_nan_detection: bool = False
    enable_p2p_check: bool = False
    triton_attention_reduce_in_fp32: bool = False
    triton_attention_num_kv_splits: int = 8
    delete_ckpt_after_loading: bool = False
    enable_memory_saver: bool = False
    allow_auto_truncate: bool = False
    enable_custom_logit_processor: bool = False
    enable_deterministic_inference: bool = False
    enable_return_hidden_states: bool = False
    disable_chunked_prefix_cache: bool = False
    json_model_override_args: str = "{}"
    preferred_sampling_params: Optional[str] = None

    def __post_init__(self):
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.mem_fraction_static is None:
            self.mem_fraction_static = 0.85 if self.tp_size < 4 else 0.81
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192
        if self.page_size is None:
            self.page_size = 1
        if self.log_level_http is None:
            self.log_level_http = self.log_level
        if self.cuda_graph_backend_decode == "disabled":
            self.disable_cuda_graph = True
        if self.attention_backend is None:
            self.attention_backend = "fa3"
            logger.info("Attention backend not explicitly specified. Use fa3 backend by default.")
        if self.speculative_algorithm is not None:
            self._handle_speculative_decoding()
        if self.cuda_graph_max_bs_decode is None:
            self.cuda_graph_max_bs_decode = 160 if self.speculative_algorithm else 256
        if self.cuda_graph_max_bs_prefill is None:
            self.cuda_graph_max_bs_prefill = 16

    def _handle_speculative_decoding(self):
        name = self.speculative_algorithm.upper()
        if name not in SPECULATIVE_ALGORITHMS:
            raise ValueError(
                f"Unknown speculative algorithm name: {self.speculative_algorithm}. "
                f"Registered algorithms: {', '.join(SPECULATIVE_ALGORITHMS)}"
            )
        self.speculative_algorithm = "EAGLE" if name == "NEXTN" else name
        if self.speculative_algorithm not in ("EAGLE", "EAGLE3"):
            raise ValueError(f"The rehearsal server only emulates EAGLE and EAGLE3, not {self.speculative_algorithm}.")
        if self.speculative_draft_model_path is None:
            raise ValueError("--speculative-draft-model-path is required for EAGLE speculative decoding")
        if self.speculative_algorithm == "EAGLE3" and self.speculative_token_map is not None:
            logger.warning("Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map.")
            self.speculative_token_map = None
        if None in (self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens):
            steps, topk, draft_tokens = _auto_choose_speculative_params(self.model_path)
            if self.speculative_num_steps is None:
                self.speculative_num_steps = steps
            if self.speculative_eagle_topk is None:
                self.speculative_eagle_topk = topk
            if self.speculative_num_draft_tokens is None:
                self.speculative_num_draft_tokens = draft_tokens
        if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1
        self.max_running_requests = self.max_running_requests or 48

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        # Model and tokenizer
        parser.add_argument("--model-path", "--model", type=str, help="The path of the model weights.", required=True)
        parser.add_argument("--tokenizer-path", type=str, default=ServerArgs.tokenizer_path, help="The path of the tokenizer.")
        parser.add_argument("--tokenizer-mode", type=str, default=ServerArgs.tokenizer_mode, choices=["auto", "slow"], help="Tokenizer mode.")
        parser.add_argument("--tokenizer-worker-num", type=int, default=ServerArgs.tokenizer_worker_num, help="The worker num of the tokenizer manager.")
        parser.add_argument("--skip-tokenizer-init", action="store_true", help="If set, skip init tokenizer and pass input_ids in generate request.")
        parser.add_argument("--load-format", type=str, default=ServerArgs.load_format, help="The format of the model weights to load.")
        parser.add_argument("--model-loader-extra-config", type=str, default=ServerArgs.model_loader_extra_config, help="Extra config for model loader.")
        parser.add_argument("--trust-remote-code", action="store_true", help="Whether or not to allow for custom models defined on the Hub.")
        parser.add_argument("--context-length", type=int, default=ServerArgs.context_length, help="The model's maximum context length.")
        parser.add_argument("--is-embedding", action="store_true", help="Whether to use a CausalLM as an embedding model.")
        parser.add_argument("--enable-multimodal", default=ServerArgs.enable_multimodal, action="store_true", help="Enable the multimodal functionality.")
        parser.add_argument("--revision", type=str, default=None, help="The specific model version to use.")
        parser.add_argument("--model-impl", type=str, default=ServerArgs.model_impl, help="Which implementation of the model to use.")
        parser.add_argument("--dtype", type=str, default=ServerArgs.dtype, choices=["auto", "half", "float16", "bfloat16", "float", "float32"], help="Data type for model weights and activations.")
        parser.add_argument("--quantization", type=str, default=ServerArgs.quantization, help="The quantization method.")
        parser.add_argument("--kv-cache-dtype", type=str, default=ServerArgs.kv_cache_dtype, help="Data type for kv cache storage.")
        parser.add_argument("--served-model-name", type=str, default=ServerArgs.served_model_name, help="Override the model name returned by the v1/models endpoint in OpenAI API server.")
        parser.add_argument("--chat-template", type=str, default=ServerArgs.chat_template, help="The builtin chat template name or the path of the chat template file.")
        parser.add_argument("--completion-template", type=str, default=ServerArgs.completion_template, help="The builtin completion template name or the path of the completion template file.")
        parser.add_argument("--weight-version", type=str, default=ServerArgs.weight_version, help="Version identifier for the model weights.")

        # HTTP server
        parser.add_argument("--host", type=str, default=ServerArgs.host, help="The host of the HTTP server.")
        parser.add_argument("--port", type=int, default=ServerArgs.port, help="The port of the HTTP server.")
        parser.add_argument("--skip-server-warmup", action="store_true", help="If set, skip warmup.")
        parser.add_argument("--warmups", type=str, default=ServerArgs.warmups, help="Warmup functions to run before the server starts.")
        parser.add_argument("--nccl-port", type=int, default=ServerArgs.nccl_port, help="The port for NCCL distributed environment setup.")
        parser.add_argument("--fastapi-root-path", type=str, default=ServerArgs.fastapi_root_path, help="App is behind a path based routing proxy.")

        # Memory and scheduling
        parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static, help="The fraction of the memory used for static allocation (model weights and KV cache memory pool).")
        parser.add_argument("--max-running-requests", type=int, default=ServerArgs.max_running_requests, help="The maximum number of running requests.")
        parser.add_argument("--max-queued-requests", type=int, default=ServerArgs.max_queued_requests, help="The maximum number of queued requests.")
        parser.add_argument("--max-total-tokens", type=int, default=ServerArgs.max_total_tokens, help="The maximum number of tokens in the memory pool.")
        parser.add_argument("--chunked-prefill-size", type=int, default=ServerArgs.chunked_prefill_size, help="The maximum number of tokens in a chunk for the chunked prefill.")
        parser.add_argument("--max-prefill-tokens", type=int, default=ServerArgs.max_prefill_tokens, help="The maximum number of tokens in a prefill batch.")
        parser.add_argument("--schedule-policy", type=str, default=ServerArgs.schedule_policy, choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"], help="The scheduling policy of the requests.")
        parser.add_argument("--schedule-conservativeness", type=float, default=ServerArgs.schedule_conservativeness, help="How conservative the schedule policy is.")
        parser.add_argument("--page-size", type=int, default=ServerArgs.page_size, help="The number of tokens in a page.")
        parser.add_argument("--disable-radix-cache", action="store_true", help="Disable RadixAttention for prefix caching.")
        parser.add_argument("--cpu-offload-gb", type=int, default=ServerArgs.cpu_offload_gb, help="How many GBs of RAM to reserve for CPU offloading.")
        parser.add_argument("--num-continuous-decode-steps", type=int, default=ServerArgs.num_continuous_decode_steps, help="Run multiple continuous decoding steps to reduce scheduling overhead.")

        # Runtime
        parser.add_argument("--device", type=str, default=ServerArgs.device, help="The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu').")
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=ServerArgs.tp_size, help="The tensor parallelism size.")
        parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=ServerArgs.pp_size, help="The pipeline parallelism size.")
        parser.add_argument("--dp-size", "--data-parallel-size", type=int, default=ServerArgs.dp_size, help="The data parallelism size.")
        parser.add_argument("--ep-size", "--expert-parallel-size", type=int, default=ServerArgs.ep_size, help="The expert parallelism size.")
        parser.add_argument("--stream-interval", type=int, default=ServerArgs.stream_interval, help="The interval (or buffer size) for streaming in terms of the token length.")
        parser.add_argument("--stream-output", action="store_true", help="Whether to output as a sequence of disjoint segments.")
        parser.add_argument("--random-seed", type=int, default=ServerArgs.random_seed, help="The random seed.")
        parser.add_argument("--watchdog-timeout", type=float, default=ServerArgs.watchdog_timeout, help="Set watchdog timeout in seconds.")
        parser.add_argument("--dist-timeout", type=int, default=ServerArgs.dist_timeout, help="Set timeout for torch.distributed initialization.")
        parser.add_argument("--download-dir", type=str, default=ServerArgs.download_dir, help="Model download directory for huggingface.")
        parser.add_argument("--base-gpu-id", type=int, default=ServerArgs.base_gpu_id, help="The base GPU ID to start allocating GPUs from.")
        parser.add_argument("--gpu-id-step", type=int, default=ServerArgs.gpu_id_step, help="The delta between consecutive GPU IDs that are used.")
        parser.add_argument("--sleep-on-idle", action="store_true", help="Reduce CPU usage when sglang is idle.")

        # Logging and metrics
        parser.add_argument("--log-level", type=str, default=ServerArgs.log_level, help="The logging level of all loggers.")
        parser.add_argument("--log-level-http", type=str, default=ServerArgs.log_level_http, help="The logging level of HTTP server.")
        parser.add_argument("--log-requests", action="store_true", help="Log metadata, inputs, outputs of all requests.")
        parser.add_argument("--log-requests-level", type=int, default=ServerArgs.log_requests_level, choices=[0, 1, 2, 3], help="How much of each request to log.")
        parser.add_argument("--crash-dump-folder", type=str, default=ServerArgs.crash_dump_folder, help="Folder path to dump requests from the last 5 min before a crash.")
        parser.add_argument("--show-time-cost", action="store_true", help="Show time cost of custom marks.")
        parser.add_argument("--enable-metrics", action="store_true", help="Enable log prometheus metrics.")
        parser.add_argument("--enable-metrics-for-all-schedulers", action="store_true", help="Enable metrics on all TP ranks.")
        parser.add_argument("--collect-tokens-histogram", action="store_true", help="Collect prompt/generation tokens histogram.")
        parser.add_argument("--decode-log-interval", type=int, default=ServerArgs.decode_log_interval, help="The log interval of decode batch.")
        parser.add_argument("--enable-request-time-stats-logging", action="store_true", help="Enable per request time stats logging.")
        parser.add_argument("--enable-mfu-metrics", action="store_true", help="Log estimated FLOPs and memory bandwidth on decode lines.")

        # API
        parser.add_argument("--api-key", type=str, default=ServerArgs.api_key, help="Set API key of the server.")
        parser.add_argument("--file-storage-path", type=str, default=ServerArgs.file_storage_path, help="The path of the file storage in backend.")
        parser.add_argument("--enable-cache-report", action="store_true", help="Return number of cached tokens in usage.prompt_tokens_details.")
        parser.add_argument("--reasoning-parser", type=str, default=ServerArgs.reasoning_parser, help="Specify the parser for reasoning models.")
        parser.add_argument("--tool-call-parser", type=str, default=ServerArgs.tool_call_parser, help="Specify the parser for handling tool-call interactions.")

        # Data parallelism and multi-node
        parser.add_argument("--load-balance-method", type=str, default=ServerArgs.load_balance_method, choices=["round_robin", "shortest_queue", "minimum_tokens"], help="The load balancing strategy for data parallelism.")
        parser.add_argument("--dist-init-addr", "--nccl-init-addr", type=str, help="The host address for initializing distributed backend.")
        parser.add_argument("--nnodes", type=int, default=ServerArgs.nnodes, help="The number of nodes.")
        parser.add_argument("--node-rank", type=int, default=ServerArgs.node_rank, help="The node rank.")

        # Kernel backends
        parser.add_argument("--attention-backend", type=str, default=ServerArgs.attention_backend, help="Choose the kernels for attention layers.")
        parser.add_argument("--prefill-attention-backend", type=str, default=ServerArgs.prefill_attention_backend, help="Choose the kernels for prefill attention layers.")
        parser.add_argument("--decode-attention-backend", type=str, default=ServerArgs.decode_attention_backend, help="Choose the kernels for decode attention layers.")
        parser.add_argument("--sampling-backend", type=str, default=ServerArgs.sampling_backend, help="Choose the kernels for sampling layers.")
        parser.add_argument("--grammar-backend", type=str, default=ServerArgs.grammar_backend, help="Choose the backend for grammar-guided decoding.")
        parser.add_argument("--mm-attention-backend", type=str, default=ServerArgs.mm_attention_backend, help="Set multimodal attention backend.")
        parser.add_argument("--moe-runner-backend", type=str, default=ServerArgs.moe_runner_backend, help="Choose the runner backend for MoE.")
        parser.add_argument("--moe-a2a-backend", type=str, default=ServerArgs.moe_a2a_backend, help="Choose the backend for MoE A2A.")

        # Speculative decoding
        parser.add_argument("--speculative-algorithm", type=str, help="Speculative algorithm: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO, or a registered name.")
        parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str, help="The path of the draft model weights.")
        parser.add_argument("--speculative-draft-model-revision", type=str, default=None, help="The specific draft model version to use.")
        parser.add_argument("--speculative-draft-load-format", type=str, default=ServerArgs.speculative_draft_load_format, help="The format of the draft model weights to load.")
        parser.add_argument("--speculative-num-steps", type=int, help="The number of steps sampled from draft model in Speculative Decoding.", default=ServerArgs.speculative_num_steps)
        parser.add_argument("--speculative-eagle-topk", type=int, help="The number of tokens sampled from the draft model in eagle2 each step.", default=ServerArgs.speculative_eagle_topk)
        parser.add_argument("--speculative-num-draft-tokens", type=int, help="The number of tokens sampled from the draft model in Speculative Decoding.", default=ServerArgs.speculative_num_draft_tokens)
        parser.add_argument("--speculative-accept-threshold-single", type=float, help="Accept a draft token if its probability in the target model is greater than this threshold.", default=ServerArgs.speculative_accept_threshold_single)
        parser.add_argument("--speculative-accept-threshold-acc", type=float, help="The accept probability of a draft token is raised from its target probability p to min(1, p / threshold_acc).", default=ServerArgs.speculative_accept_threshold_acc)
        parser.add_argument("--speculative-token-map", type=str, help="The path of the draft model's small vocab table.", default=ServerArgs.speculative_token_map)
        parser.add_argument("--speculative-attention-mode", type=str, choices=["prefill", "decode"], help="Attention backend for speculative decoding operations.", default=ServerArgs.speculative_attention_mode)
        parser.add_argument("--speculative-draft-attention-backend", type=str, default=ServerArgs.speculative_draft_attention_backend, help="Attention backend for the draft model.")
        parser.add_argument("--speculative-moe-runner-backend", type=str, default=ServerArgs.speculative_moe_runner_backend, help="MoE runner backend for the draft model.")
        parser.add_argument("--speculative-draft-model-quantization", type=str, default=ServerArgs.speculative_draft_model_quantization, help="The quantization method for the draft model.")

        # Optimizations
        parser.add_argument("--cuda-graph-max-bs-decode", type=int, default=ServerArgs.cuda_graph_max_bs_decode, help="Set the maximum batch size for decode cuda graph.")
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int, default=ServerArgs.cuda_graph_max_bs_prefill, help="Set the maximum batch size for prefill cuda graph.")
        parser.add_argument("--cuda-graph-bs", type=int, nargs="+", help="Set the list of batch sizes for cuda graph.")
        parser.add_argument("--cuda-graph-backend-decode", type=str, default=ServerArgs.cuda_graph_backend_decode, choices=["auto", "full", "piecewise", "disabled"], help="Graph backend for decode.")
        parser.add_argument("--cuda-graph-backend-prefill", type=str, default=ServerArgs.cuda_graph_backend_prefill, choices=["auto", "full", "piecewise", "disabled"], help="Graph backend for prefill.")
        parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction, new_hint="Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.", help="Disable cuda graph (deprecated).")
        parser.add_argument("--disable-cuda-graph-padding", action="store_true", help="Disable cuda graph when padding is needed.")
        parser.add_argument("--enable-profile-cuda-graph", action="store_true", help="Enable profiling of cuda graph capture.")
        parser.add_argument("--disable-custom-all-reduce", action="store_true", help="Disable the custom all-reduce kernel and fall back to NCCL.")
        parser.add_argument("--enable-mscclpp", action="store_true", help="Enable using mscclpp for small messages for all-reduce kernel.")
        parser.add_argument("--enable-nccl-nvls", action="store_true", help="Enable NCCL NVLS for prefill heavy requests when available.")
        parser.add_argument("--enable-symm-mem", action="store_true", help="Enable NCCL symmetric memory for fast collectives.")
        parser.add_argument("--disable-overlap-schedule", action="store_true", help="Disable the overlap scheduler.")
        parser.add_argument("--enable-mixed-chunk", action="store_true", help="Enabling mixing prefill and decode in a batch when using chunked prefill.")
        parser.add_argument("--enable-dp-attention", action="store_true", help="Enabling data parallelism for attention and tensor parallelism for FFN.")
        parser.add_argument("--enable-dp-lm-head", action="store_true", help="Enable vocabulary parallel across the attention TP group.")
        parser.add_argument("--enable-two-batch-overlap", action="store_true", help="Enabling two micro batches to overlap.")
        parser.add_argument("--enable-torch-compile", action="store_true", help="Optimize the model with torch.compile.")
        parser.add_argument("--torch-compile-max-bs", type=int, default=ServerArgs.torch_compile_max_bs, help="Set the maximum batch size when using torch compile.")
        parser.add_argument("--torchao-config", type=str, default=ServerArgs.torchao_config, help="Optimize the model with torchao.")
        parser.add_argument("--enable-nan-detection", action="store_true", help="Enable the NaN detection for debugging purposes.")
        parser.add_argument("--enable-p2p-check", action="store_true", help="Enable P2P check for GPU access.")
        parser.add_argument("--triton-attention-reduce-in-fp32", action="store_true", help="Cast the intermediate attention results to fp32.")
        parser.add_argument("--triton-attention-num-kv-splits", type=int, default=ServerArgs.triton_attention_num_kv_splits, help="The number of KV splits in flash decoding Triton kernel.")
        parser.add_argument("--delete-ckpt-after-loading", action="store_true", help="Delete the model checkpoint after loading the model.")
        parser.add_argument("--enable-memory-saver", action="store_true", help="Allow saving memory using release_memory_occupation and resume_memory_occupation.")
        parser.add_argument("--allow-auto-truncate", action="store_true", help="Allow automatically truncating requests that exceed the maximum input length.")
        parser.add_argument("--enable-custom-logit-processor", action="store_true", help="Enable users to pass custom logit processors to the server.")
        parser.add_argument("--enable-deterministic-inference", action="store_true", help="Enable deterministic inference mode with batch invariant ops.")
        parser.add_argument("--enable-return-hidden-states", action="store_true", help="Enable returning hidden states with responses.")
        parser.add_argument("--disable-chunked-prefix-cache", action="store_true", help="Disable chunked prefix cache feature for deepseek.")
        parser.add_argument("--json-model-override-args", type=str, default=ServerArgs.json_model_override_args, help="A dictionary in JSON string format used to override default model configurations.")
        parser.add_argument("--preferred-sampling-params", type=str, help="json-formatted sampling settings that will be returned in /model_info")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names if hasattr(args, name)})

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _auto_choose_speculative_params(model_path: str) -> tuple[int, int, int]:
    """SGLang's auto defaults: (5, 4, 8) for Llama targets, (3, 1, 4) for everything else."""
    try:
        architectures = json.loads((Path(model_path) / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        architectures = []
    if architectures and architectures[0] == "LlamaForCausalLM":
        return 5, 4, 8
    return 3, 1, 4


def prepare_server_args(argv: list[str]) -> ServerArgs:
    from sglang.srt.utils import configure_logger, rank_prefix

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    configure_logger(raw_args.log_level, rank_prefix(0, raw_args.tp_size, 0 if raw_args.dp_size > 1 else None))
    return ServerArgs.from_cli_args(raw_args)
