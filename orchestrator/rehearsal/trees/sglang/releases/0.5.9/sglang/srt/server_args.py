"""The server arguments of SGLang 0.5.9 (rehearsal): its flag names and defaults in a plain argparse parser.

Every option string is a literal `parser.add_argument("--flag", ...)` call, so a static scan of
this file finds them all: the flags of 0.5.9 that the rehearsal emulates.
`allow_abbrev` keeps argparse's default (True), like SGLang: unique prefixes work and ambiguous
ones are usage errors.
"""

from __future__ import annotations

import argparse

from sglang.srt.rehearsal_server_args import parse, server_args_class


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    # Model and tokenizer
    parser.add_argument("--model-path", "--model", type=str, help="The path of the model weights.", required=True)
    parser.add_argument("--tokenizer-path", type=str, default=None, help="The path of the tokenizer.")
    parser.add_argument("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"], help="Tokenizer mode.")
    parser.add_argument("--tokenizer-worker-num", type=int, default=1, help="The worker num of the tokenizer manager.")
    parser.add_argument("--skip-tokenizer-init", action="store_true", help="If set, skip init tokenizer and pass input_ids in generate request.")
    parser.add_argument("--load-format", type=str, default="auto", help="The format of the model weights to load.")
    parser.add_argument("--model-loader-extra-config", type=str, default="{}", help="Extra config for model loader.")
    parser.add_argument("--trust-remote-code", action="store_true", help="Whether or not to allow for custom models defined on the Hub.")
    parser.add_argument("--context-length", type=int, default=None, help="The model's maximum context length.")
    parser.add_argument("--is-embedding", action="store_true", help="Whether to use a CausalLM as an embedding model.")
    parser.add_argument("--enable-multimodal", default=None, action="store_true", help="Enable the multimodal functionality.")
    parser.add_argument("--revision", type=str, default=None, help="The specific model version to use.")
    parser.add_argument("--model-impl", type=str, default="auto", help="Which implementation of the model to use.")
    parser.add_argument("--dtype", type=str, default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"], help="Data type for model weights and activations.")
    parser.add_argument("--quantization", type=str, default=None, help="The quantization method.")
    parser.add_argument("--kv-cache-dtype", type=str, default="auto", help="Data type for kv cache storage.")
    parser.add_argument("--served-model-name", type=str, default=None, help="Override the model name returned by the v1/models endpoint in OpenAI API server.")
    parser.add_argument("--chat-template", type=str, default=None, help="The builtin chat template name or the path of the chat template file.")
    parser.add_argument("--completion-template", type=str, default=None, help="The builtin completion template name or the path of the completion template file.")
    parser.add_argument("--weight-version", type=str, default="default", help="Version identifier for the model weights.")

    # HTTP server
    parser.add_argument("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
    parser.add_argument("--port", type=int, default=30000, help="The port of the HTTP server.")
    parser.add_argument("--skip-server-warmup", action="store_true", help="If set, skip warmup.")
    parser.add_argument("--warmups", type=str, default=None, help="Warmup functions to run before the server starts.")
    parser.add_argument("--nccl-port", type=int, default=None, help="The port for NCCL distributed environment setup.")
    parser.add_argument("--fastapi-root-path", type=str, default="", help="App is behind a path based routing proxy.")

    # Memory and scheduling
    parser.add_argument("--mem-fraction-static", type=float, default=None, help="The fraction of the memory used for static allocation (model weights and KV cache memory pool).")
    parser.add_argument("--max-running-requests", type=int, default=None, help="The maximum number of running requests.")
    parser.add_argument("--max-queued-requests", type=int, default=None, help="The maximum number of queued requests.")
    parser.add_argument("--max-total-tokens", type=int, default=None, help="The maximum number of tokens in the memory pool.")
    parser.add_argument("--chunked-prefill-size", type=int, default=None, help="The maximum number of tokens in a chunk for the chunked prefill.")
    parser.add_argument("--max-prefill-tokens", type=int, default=16384, help="The maximum number of tokens in a prefill batch.")
    parser.add_argument("--schedule-policy", type=str, default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"], help="The scheduling policy of the requests.")
    parser.add_argument("--schedule-conservativeness", type=float, default=1.0, help="How conservative the schedule policy is.")
    parser.add_argument("--page-size", type=int, default=None, help="The number of tokens in a page.")
    parser.add_argument("--disable-radix-cache", action="store_true", help="Disable RadixAttention for prefix caching.")
    parser.add_argument("--cpu-offload-gb", type=int, default=0, help="How many GBs of RAM to reserve for CPU offloading.")
    parser.add_argument("--num-continuous-decode-steps", type=int, default=1, help="Run multiple continuous decoding steps to reduce scheduling overhead.")

    # Runtime
    parser.add_argument("--device", type=str, default=None, help="The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu').")
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1, help="The tensor parallelism size.")
    parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1, help="The pipeline parallelism size.")
    parser.add_argument("--dp-size", "--data-parallel-size", type=int, default=1, help="The data parallelism size.")
    parser.add_argument("--ep-size", "--expert-parallel-size", type=int, default=1, help="The expert parallelism size.")
    parser.add_argument("--stream-interval", type=int, default=1, help="The interval (or buffer size) for streaming in terms of the token length.")
    parser.add_argument("--stream-output", action="store_true", help="Whether to output as a sequence of disjoint segments.")
    parser.add_argument("--random-seed", type=int, default=None, help="The random seed.")
    parser.add_argument("--watchdog-timeout", type=float, default=300, help="Set watchdog timeout in seconds.")
    parser.add_argument("--dist-timeout", type=int, default=None, help="Set timeout for torch.distributed initialization.")
    parser.add_argument("--download-dir", type=str, default=None, help="Model download directory for huggingface.")
    parser.add_argument("--base-gpu-id", type=int, default=0, help="The base GPU ID to start allocating GPUs from.")
    parser.add_argument("--gpu-id-step", type=int, default=1, help="The delta between consecutive GPU IDs that are used.")
    parser.add_argument("--sleep-on-idle", action="store_true", help="Reduce CPU usage when sglang is idle.")

    # Logging and metrics
    parser.add_argument("--log-level", type=str, default="info", help="The logging level of all loggers.")
    parser.add_argument("--log-level-http", type=str, default=None, help="The logging level of HTTP server.")
    parser.add_argument("--log-requests", action="store_true", help="Log metadata, inputs, outputs of all requests.")
    parser.add_argument("--log-requests-level", type=int, default=2, choices=[0, 1, 2, 3], help="How much of each request to log.")
    parser.add_argument("--crash-dump-folder", type=str, default=None, help="Folder path to dump requests from the last 5 min before a crash.")
    parser.add_argument("--show-time-cost", action="store_true", help="Show time cost of custom marks.")
    parser.add_argument("--enable-metrics", action="store_true", help="Enable log prometheus metrics.")
    parser.add_argument("--enable-metrics-for-all-schedulers", action="store_true", help="Enable metrics on all TP ranks.")
    parser.add_argument("--collect-tokens-histogram", action="store_true", help="Collect prompt/generation tokens histogram.")
    parser.add_argument("--decode-log-interval", type=int, default=40, help="The log interval of decode batch.")
    parser.add_argument("--enable-request-time-stats-logging", action="store_true", help="Enable per request time stats logging.")

    # API
    parser.add_argument("--api-key", type=str, default=None, help="Set API key of the server.")
    parser.add_argument("--file-storage-path", type=str, default="sglang_storage", help="The path of the file storage in backend.")
    parser.add_argument("--enable-cache-report", action="store_true", help="Return number of cached tokens in usage.prompt_tokens_details.")
    parser.add_argument("--reasoning-parser", type=str, default=None, help="Specify the parser for reasoning models.")
    parser.add_argument("--tool-call-parser", type=str, default=None, help="Specify the parser for handling tool-call interactions.")

    # Data parallelism and multi-node
    parser.add_argument("--load-balance-method", type=str, default="round_robin", choices=["round_robin", "shortest_queue", "minimum_tokens"], help="The load balancing strategy for data parallelism.")
    parser.add_argument("--dist-init-addr", "--nccl-init-addr", type=str, help="The host address for initializing distributed backend.")
    parser.add_argument("--nnodes", type=int, default=1, help="The number of nodes.")
    parser.add_argument("--node-rank", type=int, default=0, help="The node rank.")

    # Kernel backends
    parser.add_argument("--attention-backend", type=str, default=None, help="Choose the kernels for attention layers.")
    parser.add_argument("--prefill-attention-backend", type=str, default=None, help="Choose the kernels for prefill attention layers.")
    parser.add_argument("--decode-attention-backend", type=str, default=None, help="Choose the kernels for decode attention layers.")
    parser.add_argument("--sampling-backend", type=str, default=None, help="Choose the kernels for sampling layers.")
    parser.add_argument("--grammar-backend", type=str, default=None, help="Choose the backend for grammar-guided decoding.")
    parser.add_argument("--mm-attention-backend", type=str, default=None, help="Set multimodal attention backend.")
    parser.add_argument("--moe-runner-backend", type=str, default="auto", help="Choose the runner backend for MoE.")
    parser.add_argument("--moe-a2a-backend", type=str, default="none", help="Choose the backend for MoE A2A.")

    # Speculative decoding
    parser.add_argument("--speculative-algorithm", type=str, choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"], help="Speculative algorithm.")
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str, help="The path of the draft model weights.")
    parser.add_argument("--speculative-draft-model-revision", type=str, default=None, help="The specific draft model version to use.")
    parser.add_argument("--speculative-draft-load-format", type=str, default=None, help="The format of the draft model weights to load.")
    parser.add_argument("--speculative-num-steps", type=int, help="The number of steps sampled from draft model in Speculative Decoding.", default=None)
    parser.add_argument("--speculative-eagle-topk", type=int, help="The number of tokens sampled from the draft model in eagle2 each step.", default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, help="The number of tokens sampled from the draft model in Speculative Decoding.", default=None)
    parser.add_argument("--speculative-accept-threshold-single", type=float, help="Accept a draft token if its probability in the target model is greater than this threshold.", default=1.0)
    parser.add_argument("--speculative-accept-threshold-acc", type=float, help="The accept probability of a draft token is raised from its target probability p to min(1, p / threshold_acc).", default=1.0)
    parser.add_argument("--speculative-token-map", type=str, help="The path of the draft model's small vocab table.", default=None)
    parser.add_argument("--speculative-attention-mode", type=str, choices=["prefill", "decode"], help="Attention backend for speculative decoding operations.", default="prefill")
    parser.add_argument("--speculative-draft-attention-backend", type=str, default=None, help="Attention backend for the draft model.")
    parser.add_argument("--speculative-moe-runner-backend", type=str, default=None, help="MoE runner backend for the draft model.")
    parser.add_argument("--speculative-draft-model-quantization", type=str, default=None, help="The quantization method for the draft model.")

    # Optimizations
    parser.add_argument("--cuda-graph-max-bs", type=int, default=None, help="Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this value.")
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+", help="Set the list of batch sizes for cuda graph.")
    parser.add_argument("--disable-cuda-graph", action="store_true", help="Disable cuda graph.")
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
    parser.add_argument("--torch-compile-max-bs", type=int, default=32, help="Set the maximum batch size when using torch compile.")
    parser.add_argument("--torchao-config", type=str, default="", help="Optimize the model with torchao.")
    parser.add_argument("--enable-nan-detection", action="store_true", help="Enable the NaN detection for debugging purposes.")
    parser.add_argument("--enable-p2p-check", action="store_true", help="Enable P2P check for GPU access.")
    parser.add_argument("--triton-attention-reduce-in-fp32", action="store_true", help="Cast the intermediate attention results to fp32.")
    parser.add_argument("--triton-attention-num-kv-splits", type=int, default=8, help="The number of KV splits in flash decoding Triton kernel.")
    parser.add_argument("--delete-ckpt-after-loading", action="store_true", help="Delete the model checkpoint after loading the model.")
    parser.add_argument("--enable-memory-saver", action="store_true", help="Allow saving memory using release_memory_occupation and resume_memory_occupation.")
    parser.add_argument("--allow-auto-truncate", action="store_true", help="Allow automatically truncating requests that exceed the maximum input length.")
    parser.add_argument("--enable-custom-logit-processor", action="store_true", help="Enable users to pass custom logit processors to the server.")
    parser.add_argument("--enable-deterministic-inference", action="store_true", help="Enable deterministic inference mode with batch invariant ops.")
    parser.add_argument("--enable-return-hidden-states", action="store_true", help="Enable returning hidden states with responses.")
    parser.add_argument("--disable-chunked-prefix-cache", action="store_true", help="Disable chunked prefix cache feature for deepseek.")
    parser.add_argument("--json-model-override-args", type=str, default="{}", help="A dictionary in JSON string format used to override default model configurations.")
    parser.add_argument("--preferred-sampling-params", type=str, help="json-formatted sampling settings that will be returned in /model_info")


ServerArgs = server_args_class(add_cli_args)


def prepare_server_args(argv: list[str]):
    return parse(ServerArgs, add_cli_args, argv)
