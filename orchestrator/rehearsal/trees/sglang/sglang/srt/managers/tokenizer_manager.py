"""Tokenize requests, hand them to the scheduler, build SGLang's responses (meta_info and all)."""

from __future__ import annotations

import logging
import signal
import time
import uuid

from sglang.srt.hf_transformers_utils import get_tokenizer
from sglang.srt.managers.scheduler import Req
from sglang.srt.utils import kill_process_tree, release_at_least

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 128


class ServerStatus:
    Starting = "Starting"
    Up = "Up"
    UnHealthy = "UnHealthy"


class TokenizerManager:
    def __init__(self, server_args, scheduler):
        self.server_args = server_args
        self.scheduler = scheduler
        self.model_config = scheduler.model_config
        self.context_len = scheduler.context_len
        self.tokenizer = get_tokenizer(self.model_config.vocab_size)
        self.server_status = ServerStatus.Starting
        self.last_receive_tstamp = 0.0
        signal.signal(signal.SIGQUIT, self.running_phase_sigquit_handler)

    def running_phase_sigquit_handler(self, signum, frame):
        logger.error(f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed.")
        kill_process_tree()

    def mark_ready(self) -> None:
        self.server_status = ServerStatus.Up
        self.scheduler.server_ready = True

    # --- requests ----------------------------------------------------------------------

    def _make_reqs(self, obj: dict) -> tuple[list[Req], bool]:
        """One Req per prompt; `single` says whether the caller sent one prompt or a list."""
        if obj.get("text") is not None:
            prompts = obj["text"]
            single = isinstance(prompts, str)
            id_lists = [self.tokenizer.encode(p) for p in ([prompts] if single else prompts)]
        elif obj.get("input_ids") is not None:
            ids = obj["input_ids"]
            single = not ids or not isinstance(ids[0], list)
            id_lists = [list(ids)] if single else [list(x) for x in ids]
        else:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        params = obj.get("sampling_params") or {}
        params_list = params if isinstance(params, list) else [params] * len(id_lists)
        rids = obj.get("rid")
        rid_list = rids if isinstance(rids, list) else [rids] * len(id_lists)
        reqs = []
        for ids, sp, rid in zip(id_lists, params_list, rid_list):
            if not ids:
                raise ValueError("The input_ids is empty.")
            if any(not isinstance(i, int) or not 0 <= i < self.model_config.vocab_size for i in ids):
                raise ValueError(f"The input_ids contain token ids outside [0, {self.model_config.vocab_size}).")
            max_new = sp.get("max_new_tokens")
            max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
            if max_new < 0:
                raise ValueError(f"max_new_tokens must be at least 0, got {max_new}.")
            if len(ids) >= self.context_len:
                raise ValueError(f"The input ({len(ids)} tokens) is longer than the model's context length ({self.context_len} tokens).")
            if len(ids) + max_new > self.context_len:
                raise ValueError(
                    f"Requested token count exceeds the model's maximum context length of {self.context_len} tokens. "
                    f"You requested a total of {len(ids) + max_new} tokens: {len(ids)} tokens from the input messages "
                    f"and {max_new} tokens for the completion. Please reduce the number of tokens in the input "
                    f"messages or the completion to fit within the limit."
                )
            rid = rid if rid is not None else uuid.uuid4().hex
            reqs.append(Req(rid, ids, max(max_new, 1), bool(obj.get("stream")), bool(sp.get("ignore_eos"))))
            reqs[-1].requested_max_new_tokens = max_new
        return reqs, single

    def generate(self, obj: dict):
        """Blocking: the response dict (or list of them for a batch)."""
        reqs, single = self._make_reqs(obj)
        for req in reqs:
            self.scheduler.submit(req)
        outputs = []
        for req in reqs:
            while req.outbox.get()[0] != "done":
                pass
            outputs.append(self._output(req))
        self.last_receive_tstamp = time.time()
        return outputs[0] if single else outputs

    def generate_stream(self, obj: dict):
        """Yield response dicts as tokens arrive (one prompt only)."""
        reqs, single = self._make_reqs(obj)
        if not single or len(reqs) != 1:
            raise ValueError("Streaming is supported for a single prompt only in the rehearsal server.")
        req = reqs[0]
        self.scheduler.submit(req)
        while True:
            kind, count = req.outbox.get()
            self.last_receive_tstamp = time.time()
            if kind == "done":
                yield self._output(req)
                return
            yield self._output(req, count)

    def health_generate(self, timeout: float) -> bool:
        req = Req(f"HEALTH_CHECK_{time.time()}", [0], 1)
        self.scheduler.submit(req)
        try:
            req.outbox.get(timeout=timeout)
        except Exception:
            return False
        self.last_receive_tstamp = time.time()
        return True

    # --- responses ---------------------------------------------------------------------

    def _output(self, req: Req, count: int | None = None) -> dict:
        """The response as the emulated release builds it: meta_info keys in its order."""
        finished = count is None
        output_ids = req.output_ids[: req.requested_max_new_tokens] if finished else req.output_ids[:count]
        finish_reason = req.finished_reason if finished else None
        if finished and req.finished_reason is not None and req.requested_max_new_tokens == 0:
            finish_reason = {"type": "length", "length": 0}
        meta = {"id": req.rid, "finish_reason": finish_reason, "prompt_tokens": len(req.origin_input_ids)}
        spec_on = finished and self.server_args.speculative_algorithm and req.spec_verify_ct > 0
        response = {"text": self.tokenizer.decode(output_ids)}
        if release_at_least("0.5.23"):
            meta.update(weight_version=self.server_args.weight_version, num_retractions=0, reasoning_tokens=0)
        elif release_at_least("0.5.9"):
            meta.update(weight_version=self.server_args.weight_version, total_retractions=0)
        meta.update(completion_tokens=len(output_ids), cached_tokens=req.cached_tokens)
        if release_at_least("0.5.9"):
            response["output_ids"] = list(output_ids)
            if finished:
                meta["e2e_latency"] = req.finished_time - req.created_time
            if spec_on:
                meta.update(self._spec_meta(req, len(output_ids)))
        else:  # 0.4.10: spec_verify_ct only, set before the latency
            if spec_on:
                meta["spec_verify_ct"] = req.spec_verify_ct
            if finished:
                meta["e2e_latency"] = req.finished_time - req.created_time
        response["meta_info"] = meta
        return response

    def _spec_meta(self, req: Req, completion_tokens: int) -> dict:
        """Speculative-decoding fields of a finished request (0.5.9 and 0.5.23 names)."""
        proposed = req.spec_verify_ct * (self.server_args.speculative_num_draft_tokens - 1)
        correct = req.spec_num_correct_drafts
        rate = correct / proposed if proposed else 0.0
        length = completion_tokens / req.spec_verify_ct
        histogram = list(req.spec_correct_drafts_histogram)
        if release_at_least("0.5.23"):
            return {"spec_accept_rate": rate, "spec_accept_length": length, "spec_num_correct_drafts": correct,
                    "spec_num_proposed_drafts": proposed, "spec_verify_ct": req.spec_verify_ct,
                    "spec_correct_drafts_histogram": histogram}
        return {"spec_accept_rate": rate, "spec_accept_length": length, "spec_accept_token_num": correct,
                "spec_draft_token_num": proposed, "spec_verify_ct": req.spec_verify_ct, "spec_accept_histogram": histogram}


def install_launch_phase_sigquit_handler() -> None:
    def launch_phase_sigquit_handler(signum, frame):
        logger.error("Received sigquit from a child process. It usually means the child failed.")
        kill_process_tree()

    signal.signal(signal.SIGQUIT, launch_phase_sigquit_handler)

