"""The scheduler: continuous batching over the target (and draft), with SGLang's stats lines.

The rehearsal runs it as a thread of the server process; its log lines carry the rank prefix
(`TP0` only when --tp-size > 1). A crash logs `Scheduler hit an exception: <traceback>` and
sends SIGQUIT to the process, as SGLang's scheduler does to its parent.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from collections import deque

from sglang.srt import _torch as torch
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.scheduler_metrics_mixin import SchedulerMetricsMixin
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.model_executor.rehearsal_runner import SimulatedGpuMemory
from sglang.srt.models.rehearsal_target import text_model
from sglang.srt.utils import get_exception_traceback, rank_logger, rank_prefix, simulated_failure

logger = logging.getLogger(__name__)

PREFIX_CACHE_ENTRIES = 256


class Req:
    def __init__(self, rid: str, input_ids: list[int], max_new_tokens: int, stream: bool = False, ignore_eos: bool = False):
        self.rid = rid
        self.origin_input_ids = list(input_ids)
        self.output_ids: list[int] = []
        self.max_new_tokens = max_new_tokens
        self.stream = stream
        self.ignore_eos = ignore_eos
        self.cached_tokens = 0
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.spec_correct_drafts_histogram: list[int] = []  # verify steps by number of drafts accepted
        self.finished_reason: dict | None = None
        self.created_time = time.time()
        self.finished_time: float | None = None
        self.outbox: queue.Queue = queue.Queue()  # ("chunk", n_tokens) ... ("done", None) | ("error", msg)

    def record_correct_drafts(self, num_correct_drafts: int) -> None:
        if len(self.spec_correct_drafts_histogram) <= num_correct_drafts:
            self.spec_correct_drafts_histogram.extend([0] * (num_correct_drafts - len(self.spec_correct_drafts_histogram) + 1))
        self.spec_correct_drafts_histogram[num_correct_drafts] += 1

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids


class Scheduler(SchedulerMetricsMixin):
    def __init__(self, server_args, tp_rank: int = 0, dp_rank: int | None = None):
        self.server_args = server_args
        self.tp_rank = tp_rank
        per_node = max(1, server_args.tp_size // max(1, server_args.nnodes))  # SGLang: tp_rank % tp_size_per_node
        self.gpu_id = server_args.base_gpu_id + (tp_rank % per_node) * server_args.gpu_id_step
        if tp_rank != 0:
            # The rehearsal computes on rank 0; the other ranks only claim their device.
            torch.cuda.set_device(self.gpu_id)
            return
        self.spec_algorithm = server_args.speculative_algorithm
        self.memory = SimulatedGpuMemory()
        self.model_config = ModelConfig(server_args.model_path, context_length=server_args.context_length)
        self.tp_worker = ModelRunner(self.model_config, server_args, self.gpu_id, tp_rank, self.memory)
        self.draft_worker = None
        if self.spec_algorithm:
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            self.draft_worker = EAGLEWorker(server_args, self.gpu_id, tp_rank, self.tp_worker, self.memory)
        self.max_total_num_tokens = self.tp_worker.max_total_num_tokens
        self.context_len = self.model_config.context_len
        self.max_running_requests = server_args.max_running_requests or min(4096, self.max_total_num_tokens // 2048 or 1)
        self.max_req_input_len = min(self.context_len - 1, self.max_total_num_tokens - 1)
        logger.info(
            f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size={server_args.chunked_prefill_size}, "
            f"max_prefill_tokens={server_args.max_prefill_tokens}, max_running_requests={self.max_running_requests}, "
            f"context_len={self.context_len}, available_gpu_mem={self.memory.free_gb:.2f} GB"
        )
        self.lock = threading.Condition()
        self.waiting_queue: deque[Req] = deque()
        self.running: list[Req] = []
        self.prefix_cache: deque[list[int]] = deque(maxlen=PREFIX_CACHE_ENTRIES)
        self.server_ready = False
        self.startup_time = time.time()
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.last_decode_stats_tic = time.perf_counter()
        self.last_prefill_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.last_input_throughput = 0.0
        self.spec_num_accept_tokens = 0
        self.spec_num_forward_ct = 0
        self.spec_num_correct_drafts = 0
        self.spec_total_num_accept_tokens = 0
        self.spec_total_num_forward_ct = 0
        self.last_spec_accept_length = 0.0
        self.last_spec_accept_rate = 0.0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_requests_total = 0

    # --- requests in and out -------------------------------------------------------------

    def submit(self, req: Req) -> None:
        with self.lock:
            self.waiting_queue.append(req)
            self.lock.notify()

    def flush_cache(self) -> bool:
        with self.lock:
            if self.waiting_queue or self.running:
                logger.warning(
                    f"Cache not flushed because there are pending requests. #queue-req: {len(self.waiting_queue)}, "
                    f"#running-req: {len(self.running)}"
                )
                return False
            self.prefix_cache.clear()
            self.spec_total_num_accept_tokens = 0
            self.spec_total_num_forward_ct = 0
            logger.info("Cache flushed successfully!")
            return True

    def get_internal_state(self) -> dict:
        import dataclasses

        state = dataclasses.asdict(self.server_args)
        state.update(
            last_gen_throughput=self.last_gen_throughput,
            memory_usage={
                "weight": round(15.02 / self.server_args.tp_size, 2),
                "kvcache": round(self.max_total_num_tokens * 131072 / (1 << 30), 2),
                "token_capacity": self.max_total_num_tokens,
                "graph": 0.0 if self.server_args.disable_cuda_graph else 0.52,
            },
            effective_max_running_requests_per_dp=self.max_running_requests,
            world_size=self.server_args.tp_size * self.server_args.pp_size,
            startup_time=self.startup_time,
        )
        if self.spec_algorithm and self.spec_total_num_forward_ct > 0:
            state["avg_spec_accept_length"] = self.spec_total_num_accept_tokens / self.spec_total_num_forward_ct
        return state

    # --- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._run, name="scheduler", daemon=True).start()

    def _run(self) -> None:
        try:
            self.event_loop()
        except Exception:
            logger.error(f"Scheduler hit an exception: {get_exception_traceback()}")
            os.kill(os.getpid(), signal.SIGQUIT)

    def event_loop(self) -> None:
        while True:
            with self.lock:
                while not self.waiting_queue and not self.running:
                    self.lock.wait()
                room = self.max_running_requests - len(self.running)
                new_reqs = [self.waiting_queue.popleft() for _ in range(min(room, len(self.waiting_queue)))]
            if new_reqs:
                self.run_prefill(new_reqs)
            if self.running:
                for _ in range(self.server_args.num_continuous_decode_steps):
                    if self.running:
                        self.run_decode_round()

    def run_prefill(self, reqs: list[Req]) -> None:
        for req in reqs:
            req.cached_tokens = self._match_prefix(req.origin_input_ids)
            self.prefix_cache.append(req.origin_input_ids)
        new_tokens = sum(len(r.origin_input_ids) - r.cached_tokens for r in reqs)
        now = time.perf_counter()
        gap = now - self.last_prefill_stats_tic
        self.last_prefill_stats_tic = now
        self.last_input_throughput = new_tokens / gap if gap > 0 else 0.0
        model = self.tp_worker.model
        self.tp_worker.check_forward()
        for req in reqs:
            model(torch.tensor(req.origin_input_ids[req.cached_tokens :] or req.origin_input_ids[-1:]))
        first_tokens = text_model(model).next_token_ids([r.origin_input_ids for r in reqs])
        used = self._num_used_tokens() + sum(len(r.origin_input_ids) for r in reqs)
        self.log_prefill_stats(len(reqs), new_tokens, sum(r.cached_tokens for r in reqs), used / self.max_total_num_tokens)
        self.prompt_tokens_total += sum(len(r.origin_input_ids) for r in reqs)
        for req, token in zip(reqs, first_tokens):
            self._append_tokens(req, [token])
            if req.finished_reason is None:
                self.running.append(req)

    def run_decode_round(self) -> None:
        batch = list(self.running)
        contexts = [r.fill_ids for r in batch]
        if simulated_failure() == "scheduler-exception" and self.server_ready:
            self.tp_worker.fail_next_forward = True
        if self.draft_worker is not None:
            result = self.draft_worker.forward_round(contexts)
            new_tokens, correct = result.new_tokens, result.num_correct_drafts
        else:
            self.tp_worker.check_forward()
            new_tokens = [[t] for t in text_model(self.tp_worker.model).next_token_ids(contexts)]
            correct = [0] * len(batch)
        self.forward_ct_decode += 1
        for req, tokens, n_correct in zip(batch, new_tokens, correct):
            before = len(req.output_ids)
            self._append_tokens(req, tokens)
            added = len(req.output_ids) - before
            if self.draft_worker is not None:
                req.spec_verify_ct += 1
                req.spec_num_correct_drafts += min(n_correct, added)
                req.record_correct_drafts(min(n_correct, added))
                self.spec_num_accept_tokens += added
                self.spec_num_correct_drafts += min(n_correct, added)
            self.num_generated_tokens += added
        if self.draft_worker is not None:
            self.spec_num_forward_ct += len(batch)
        self.running = [r for r in self.running if r.finished_reason is None]
        if self.forward_ct_decode % self.server_args.decode_log_interval == 0:
            self.log_decode_stats(len(batch))

    def log_decode_stats(self, num_running_reqs: int) -> None:
        now = time.perf_counter()
        gap = now - self.last_decode_stats_tic
        self.last_gen_throughput = self.num_generated_tokens / gap if gap > 0 else 0.0
        self.last_decode_stats_tic = now
        self.num_generated_tokens = 0
        used = self._num_used_tokens()
        spec = None
        if self.draft_worker is not None:
            forward_ct = max(self.spec_num_forward_ct, 1)
            spec = (self.spec_num_accept_tokens, self.spec_num_correct_drafts, forward_ct)
            self.last_spec_accept_length = self.spec_num_accept_tokens / forward_ct
            self.spec_total_num_accept_tokens += self.spec_num_accept_tokens
            self.spec_total_num_forward_ct += self.spec_num_forward_ct
            self.spec_num_accept_tokens = self.spec_num_forward_ct = self.spec_num_correct_drafts = 0
        cuda_graph = not self.server_args.disable_cuda_graph and num_running_reqs <= self.server_args.graph_max_bs
        self.emit_decode_stats(num_running_reqs, used, used / self.max_total_num_tokens, spec, cuda_graph)

    # --- helpers -------------------------------------------------------------------------

    def _append_tokens(self, req: Req, tokens: list[int]) -> None:
        room = req.max_new_tokens - len(req.output_ids)
        req.output_ids.extend(tokens[:room])
        self.generation_tokens_total += min(len(tokens), room)
        if len(req.output_ids) >= req.max_new_tokens:
            req.finished_reason = {"type": "length", "length": req.max_new_tokens}
            req.finished_time = time.time()
            self.num_requests_total += 1
            req.outbox.put(("done", None))
        elif req.stream:
            req.outbox.put(("chunk", len(req.output_ids)))

    def _match_prefix(self, ids: list[int]) -> int:
        if self.server_args.disable_radix_cache:
            return 0
        best = 0
        for cached in self.prefix_cache:
            n = 0
            for a, b in zip(cached, ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, len(ids) - 1)

    def _num_used_tokens(self) -> int:
        return sum(len(r.origin_input_ids) + len(r.output_ids) for r in self.running)


def run_scheduler_process(server_args, tp_rank: int, dp_rank: int | None = None) -> Scheduler:
    """Build one rank's scheduler; on failure log it and signal the parent like SGLang's child."""
    prefix = rank_prefix(tp_rank, server_args.tp_size, dp_rank)
    try:
        return Scheduler(server_args, tp_rank, dp_rank)
    except Exception:
        traceback = get_exception_traceback()
        (logger if tp_rank == 0 else rank_logger(prefix)).error(f"Scheduler hit an exception: {traceback}")
        os.kill(os.getpid(), signal.SIGQUIT)
        time.sleep(10)  # the parent's SIGQUIT handler ends the process
        raise
