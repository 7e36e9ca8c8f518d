"""The scheduler's Prefill / Decode batch lines as SGLang 0.4.10.post2 prints them (rehearsal):
`.` after the header, no accept rate, a trailing `, `."""

from __future__ import annotations

import logging

logger = logging.getLogger("sglang.srt.managers.scheduler")


class SchedulerMetricsMixin:
    def log_prefill_stats(self, num_new_seqs: int, new_tokens: int, cached_tokens: int, token_usage: float) -> None:
        f = (
            f"Prefill batch. "
            f"#new-seq: {num_new_seqs}, "
            f"#new-token: {new_tokens}, "
            f"#cached-token: {cached_tokens}, "
            f"token usage: {token_usage:.2f}, "
        )
        f += f"#running-req: {len(self.running)}, "
        f += f"#queue-req: {len(self.waiting_queue)}, "
        logger.info(f)

    def emit_decode_stats(self, num_running_reqs: int, num_used: int, token_usage: float, spec, can_run_cuda_graph: bool) -> None:
        """`spec`: (accepted tokens with the bonus ones, correct drafts, verify forwards) since the last line."""
        msg = f"Decode batch. #running-req: {num_running_reqs}, #token: {num_used}, token usage: {token_usage:.2f}, "
        if spec is not None:
            accepted_tokens, _, forward_ct = spec
            msg += f"accept len: {accepted_tokens / forward_ct:.2f}, "
        msg += (
            f"cuda graph: {can_run_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting_queue)}, "
        )
        logger.info(msg)
