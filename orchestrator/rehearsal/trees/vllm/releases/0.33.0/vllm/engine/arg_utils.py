"""EngineArgs.add_cli_args of 0.33.0 (rehearsal): the base tree's file plus the flags of one server
over several nodes (`--nnodes`, `--node-rank`, `--master-addr`, `--master-port`), which 0.10.1.1 lacks."""

from __future__ import annotations

import argparse
import json


class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        model_group = parser.add_argument_group(title="ModelConfig")
        model_group.add_argument("--model", type=str, default="facebook/opt-125m")
        model_group.add_argument("--tokenizer", type=str, default=None)
        model_group.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
        model_group.add_argument("--dtype", type=str, default="auto")
        model_group.add_argument("--seed", type=int, default=0)
        model_group.add_argument("--max-model-len", type=int, default=None)
        model_group.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False)
        model_group.add_argument("--served-model-name", type=str, nargs="+", default=None)
        model_group.add_argument("--max-logprobs", type=int, default=20)
        parallel_group = parser.add_argument_group(title="ParallelConfig")
        parallel_group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
        parallel_group.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
        parallel_group.add_argument("--data-parallel-size", "-dp", type=int, default=1)
        parallel_group.add_argument("--distributed-executor-backend", type=str, default=None)
        # a server over several nodes without Ray (0.33.0 `engine/arg_utils.py:1175`; 0.10.1.1 has none of them)
        parallel_group.add_argument("--master-addr", type=str, default="127.0.0.1")
        parallel_group.add_argument("--master-port", type=int, default=29501)
        parallel_group.add_argument("--nnodes", "-n", type=int, default=1)
        parallel_group.add_argument("--node-rank", "-r", type=int, default=0)
        cache_group = parser.add_argument_group(title="CacheConfig")
        cache_group.add_argument("--gpu-memory-utilization", type=float, default=0.9)
        cache_group.add_argument("--block-size", type=int, default=None)
        cache_group.add_argument("--kv-cache-dtype", type=str, default="auto")
        cache_group.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
        scheduler_group = parser.add_argument_group(title="SchedulerConfig")
        scheduler_group.add_argument("--max-num-seqs", type=int, default=None)
        scheduler_group.add_argument("--max-num-batched-tokens", type=int, default=None)
        scheduler_group.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
        vllm_group = parser.add_argument_group(title="VllmConfig")
        vllm_group.add_argument("--speculative-config", type=json.loads, default=None)
        parser.add_argument("--disable-log-stats", action="store_true", default=False)
        return parser


class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser, async_args_only: bool = False):
        if not async_args_only:
            parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
        return parser
