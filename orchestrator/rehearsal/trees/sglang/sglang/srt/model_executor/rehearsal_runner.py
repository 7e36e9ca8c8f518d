"""What every release's ModelRunner shares: device set-up, weight load, KV pool, CUDA graph capture.

Memory is bookkeeping on a simulated 80 GB GPU so the log lines carry plausible numbers and
`--mem-fraction-static` / `ORCH_REHEARSAL_FAIL` can produce SGLang's real memory failures. Each
release's `model_runner.py` orders these steps and sets up EAGLE-3 aux capture its own way.
"""

from __future__ import annotations

import logging
import time

from sglang.srt import _torch as torch
from sglang.srt.model_loader.loader import get_model
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.utils import load_seconds, simulated_failure

logger = logging.getLogger(__name__)

GB = 1 << 30
TOTAL_GB = torch.cuda.total_bytes / GB
KV_BYTES_PER_TOKEN = 131072  # what an 8B-class model with bf16 KV needs per token
WEIGHT_GB = {False: 15.02, True: 0.93}  # simulated weight footprint per rank: target, draft
CUDA_GRAPH_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256]


class SimulatedGpuMemory:
    """Free memory of GPU 0 as the simulated allocations take it."""

    def __init__(self):
        self.free_gb = TOTAL_GB - 0.57  # CUDA context and NCCL buffers

    def take(self, gb: float) -> float:
        self.free_gb -= gb
        return gb


class RehearsalModelRunner:
    def __init__(self, model_config, server_args, gpu_id: int, tp_rank: int, memory: SimulatedGpuMemory, is_draft_worker: bool = False):
        self.model_config = model_config
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank
        self.memory = memory
        self.is_draft_worker = is_draft_worker
        self.spec_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        self.fail_next_forward = False

    def init_torch_distributed(self) -> None:
        logger.info("Init torch distributed begin.")
        tic = time.perf_counter()
        torch.cuda.set_device(self.gpu_id)
        if simulated_failure() == "nccl":
            raise torch.distributed.DistBackendError(
                "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system "
                "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\n"
                "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
                "Last error:\n"
                "socketStartConnect: Connect to 10.0.0.12<45931> failed : Software caused connection abort"
            )
        logger.info(f"Init torch distributed ends. elapsed={time.perf_counter() - tic:.2f} s, mem usage={self.memory.take(0.14):.2f} GB")

    def load_model(self) -> None:
        logger.info(f"Load weight begin. avail mem={self.memory.free_gb:.2f} GB")
        tic = time.perf_counter()
        time.sleep(load_seconds() * (0.25 if self.is_draft_worker else 0.75))
        self.model = get_model(self.model_config)
        usage = self.memory.take(WEIGHT_GB[self.is_draft_worker] / max(self.server_args.tp_size, 1))
        logger.info(
            f"Load weight end. elapsed={time.perf_counter() - tic:.2f} s, type={type(self.model).__name__}, "
            f"avail mem={self.memory.free_gb:.2f} GB, mem usage={usage:.2f} GB."
        )

    def init_memory_pool(self) -> None:
        args = self.server_args
        if self.is_draft_worker:
            self.max_total_num_tokens = None
            return
        reserved = (1 - args.mem_fraction_static) * TOTAL_GB
        kv_gb = self.memory.free_gb - reserved
        tokens = int(kv_gb * GB / KV_BYTES_PER_TOKEN)
        if args.max_total_tokens is not None:
            tokens = min(tokens, args.max_total_tokens)
        if tokens <= 0 or simulated_failure() == "not-enough-memory":
            raise RuntimeError(
                f"Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={args.mem_fraction_static}"
            )
        self.max_total_num_tokens = tokens
        size = self.memory.take(tokens * KV_BYTES_PER_TOKEN / GB) / 2
        dtype = "torch.bfloat16" if args.kv_cache_dtype == "auto" else args.kv_cache_dtype
        logger.info(f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {size:.2f} GB, V size: {size:.2f} GB")
        logger.info(f"Memory pool end. avail mem={self.memory.free_gb:.2f} GB")

    def init_cuda_graphs(self) -> None:
        args = self.server_args
        if args.disable_cuda_graph:
            return
        max_bs = args.graph_max_bs
        bs_list = getattr(args, "cuda_graph_bs", None) or [bs for bs in CUDA_GRAPH_BS if bs <= max_bs]
        if self.is_draft_worker:
            stages = [("draft decode", args.speculative_eagle_topk), ("draft extend", args.speculative_num_steps + 1)]
        elif not self.spec_algorithm.is_none():
            stages = [("target verify", args.speculative_num_draft_tokens)]
        else:
            stages = [("target decode", 1)]
        for stage, tokens_per_req in stages:
            shown_bs = f"bs={bs_list}, " if stage == "draft decode" else ""
            logger.info(
                f"Capture {stage} CUDA graph begin. backend=full, num_tokens_per_req={tokens_per_req}, "
                f"{shown_bs}avail mem={self.memory.free_gb:.2f} GB"
            )
            tic = time.perf_counter()
            if simulated_failure() == "oom" and not self.is_draft_worker:
                torch.cuda.fail_next_allocation()
            # the static input buffers of the largest graph
            torch.empty(max(bs_list) * tokens_per_req, self.model_config.hidden_size, dtype=torch.bfloat16)
            usage = self.memory.take(0.31 if self.is_draft_worker else 0.52)
            logger.info(
                f"Capture {stage} CUDA graph end. bs={bs_list}, elapsed={time.perf_counter() - tic:.2f} s, "
                f"mem usage={usage:.2f} GB, avail mem={self.memory.free_gb:.2f} GB."
            )

    def check_forward(self) -> None:
        if self.fail_next_forward:
            self.fail_next_forward = False
            raise torch.AcceleratorError(
                "CUDA error: an illegal memory access was encountered\n"
                "CUDA kernel errors might be asynchronously reported at any other API call, "
                "so the stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            )
