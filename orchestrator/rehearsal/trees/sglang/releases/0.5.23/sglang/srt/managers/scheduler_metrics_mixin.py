"""The scheduler's Prefill / Decode batch lines as SGLang 0.5.23 prints them (rehearsal; the real
release builds them in `managers/scheduler_components/metrics_reporter.py`)."""

from __future__ import annotations

import logging

from sglang.srt.utils import env_bool

logger = logging.getLogger("sglang.srt.managers.scheduler")


class SchedulerMetricsMixin:
    def log_prefill_stats(self, num_new_seqs: int, new_tokens: int, cached_tokens: int, token_usage: float) -> None:
        iter_msg = f" [{self.forward_ct_decode}]" if env_bool("SGLANG_LOG_FORWARD_ITERS") else ""
        msg = (
            f"Prefill batch{iter_msg}, "
            f"#new-seq: {num_new_seqs}, "
            f"#new-token: {new_tokens}, "
            f"#cached-token: {cached_tokens}, "
            f"token usage: {token_usage:.2f}, "
            f"#running-req: {len(self.running)}, "
            f"#queue-req: {len(self.waiting_queue)}, "
            f"#pending-token: 0, "
        )
        msg += "cuda graph: False, "
        msg += f"input throughput (token/s): {self.last_input_throughput:.2f}"
        logger.info(msg)

    def emit_decode_stats(self, num_running_reqs: int, num_used: int, token_usage: float, spec, can_run_cuda_graph: bool) -> None:
        """`spec`: (accepted tokens with the bonus ones, correct drafts, verify forwards) since the last line."""
        iter_msg = f" [{self.forward_ct_decode}]" if env_bool("SGLANG_LOG_FORWARD_ITERS") else ""
        msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, #token: {num_used}, token usage: {token_usage:.2f}, "
        if spec is not None:
            accepted_tokens, num_correct_drafts, forward_ct = spec
            spec_accept_length = accepted_tokens / forward_ct
            total_draft_tokens = forward_ct * (self.server_args.speculative_num_draft_tokens - 1)
            self.last_spec_accept_rate = num_correct_drafts / total_draft_tokens if total_draft_tokens > 0 else 0
            msg += f"accept len: {spec_accept_length:.2f}, accept rate: {self.last_spec_accept_rate:.2f}, "
        msg += (
            f"cuda graph: {can_run_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting_queue)}"
        )
        logger.info(msg)
