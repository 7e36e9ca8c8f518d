"""The rehearsal engine: completions decoded token by token against the target's true tokens, with
EAGLE-3 speculation when a draft is loaded, and vLLM's spec-decoding counters.

One decode step of a request drafts `num_speculative_tokens` tokens in a chain (the draft's first
step reads fc over the target's aux hidden states of the position before the last token; later
steps read the draft's own pre-norm state), verifies them against the target: accepted = the
matching prefix, plus one bonus token from the target. The counters are vLLM's
(`SpecDecodingStats.observe_draft`, vllm/v1/spec_decode/metrics.py): drafts += 1, draft tokens +=
k, accepted += n, accepted per position [0, n).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

from vllm._rehearsal import lines
from vllm._rehearsal.draft import Draft
from vllm._rehearsal.target import Target
from vllm._rehearsal.teacher import FIRST_WORD_ID, mix


@dataclass
class Stats:
    k: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    generation_tokens: int = 0

    def __post_init__(self):
        self.per_pos = [0] * self.k

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        self.drafts += 1
        self.draft_tokens += num_draft_tokens
        self.accepted += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.per_pos[i] += 1


class Engine:
    def __init__(self, target: Target, draft: Draft | None, k: int, layers: tuple[int, ...], served: str,
                 stats: Stats, max_model_len: int):
        self.target, self.draft, self.k, self.layers = target, draft, k, layers
        self.served, self.max_model_len = served, max_model_len
        self.total = stats  # since start (/metrics)
        self.interval = Stats(k)  # since the last log line
        self.lock = threading.Lock()
        self.running = 0

    def tokenize(self, prompt: str) -> list[int]:
        words = prompt.split() or [""]
        return [1] + [FIRST_WORD_ID + mix(*map(ord, w)) % (self.target.vocab_size - FIRST_WORD_ID) for w in words]

    def complete(self, request: dict, chat: bool = False) -> dict:
        """A whole answer (no `stream`): /v1/completions' or /v1/chat/completions' response."""
        context, out = self._prompt(request, chat), []
        for new in self._decode(context, request):
            out += new
        return {
            "id": _id(chat), "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": request.get("model") or self.served,
            "choices": [{"index": 0, "finish_reason": "length", "stop_reason": None, "logprobs": None,
                         **({"message": {"role": "assistant", "content": _text(out)}} if chat else
                            {"text": _text(out), "prompt_logprobs": None})}],
            "usage": _usage(len(context), len(out)),
        }

    def stream(self, request: dict, chat: bool = False):
        """serving_completion.py / serving_chat.py streams: one chunk per decode step (a verify step's
        accepted tokens and bonus token at once), (chat) a first chunk with the role, usage per chunk
        with `continuous_usage_stats`, a usage-only chunk with `include_usage`, then [DONE]."""
        context = self._prompt(request, chat)
        options = request.get("stream_options") or {}
        head = {"id": _id(chat), "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": request.get("model") or self.served}
        if chat:
            yield "data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                              "logprobs": None, "finish_reason": None}]}) + "\n\n"
        done, limit = 0, int(request.get("max_tokens") or 16)
        for new in self._decode(context, request):
            done += len(new)
            finish = "length" if done >= limit else None
            choice = {"index": 0, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                      **({"delta": {"content": _text(new)}} if chat else {"text": _text(new)})}
            usage = _usage(len(context), done) if options.get("include_usage") and options.get("continuous_usage_stats") else None
            yield "data: " + json.dumps({**head, "choices": [choice], "usage": usage}) + "\n\n"
        if options.get("include_usage"):
            yield "data: " + json.dumps({**head, "choices": [], "usage": _usage(len(context), done)}) + "\n\n"
        yield "data: [DONE]\n\n"

    def _prompt(self, request: dict, chat: bool) -> list[int]:
        if chat:
            messages = request.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            prompt = "".join(f"<|{m.get('role', 'user')}|> {m.get('content', '')} " for m in messages) + "<|assistant|>"
        else:
            prompt = request["prompt"]
            if not isinstance(prompt, str):
                raise TypeError("prompt must be a string")
        return self.tokenize(prompt)

    def _decode(self, context: list[int], request: dict):
        """The answer step by step (the prefill's first token, then each decode step's tokens), counted."""
        max_tokens = int(request.get("max_tokens") or 16)
        prompt_len, context, done = len(context), list(context), 0
        with self.lock:
            self.running += 1
        try:
            new = [self.target.next_token(context)]  # the prefill step samples the first token
            while new:
                new = new[: max_tokens - done]
                context += new
                done += len(new)
                yield new
                new = (self._step(context) if self.draft is not None else [self.target.next_token(context)]) \
                    if done < max_tokens else []
        finally:
            with self.lock:
                self.running -= 1
                for stats in (self.total, self.interval):
                    stats.prompt_tokens += prompt_len
                    stats.generation_tokens += done

    def _step(self, context: list[int]) -> list[int]:
        assert self.draft is not None
        prev = context[-2] if len(context) > 1 else 0
        seen = self.target.aux_hidden_states(prev, self.layers) if self.draft.uses_fc else self.target.last_hidden_state(prev)
        hidden = self.draft.combine_hidden_states(seen)
        token, proposals = context[-1], []
        for _ in range(self.k):
            token, hidden = self.draft.propose(self.target.embed[token], hidden)
            proposals.append(token)
        accepted: list[int] = []
        for proposal in proposals:
            true = self.target.next_token(context + accepted)
            if proposal != true:
                break
            accepted.append(true)
        bonus = self.target.next_token(context + accepted)
        with self.lock:
            for stats in (self.total, self.interval):
                stats.observe_draft(self.k, len(accepted))
        return accepted + [bonus]

    def log_loop(self, log) -> None:
        """Every VLLM_LOG_STATS_INTERVAL seconds (vllm/envs.py, default 10): the throughput line, then
        the SpecDecoding line when there were drafts; nothing while idle (vLLM logs at debug then)."""
        every = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
        last = time.monotonic()
        while True:
            time.sleep(every)
            now = time.monotonic()
            with self.lock:
                stats, self.interval = self.interval, Stats(self.k)
                running = self.running
            elapsed, last = now - last, now
            if not (stats.prompt_tokens or stats.generation_tokens or running):
                continue
            log(lines.STATS_WHERE, lines.stats_line(stats.prompt_tokens / elapsed, stats.generation_tokens / elapsed,
                                                    running, 0, 0.1 * running, 0.0))
            if stats.drafts:
                rate = 100.0 * stats.accepted / stats.draft_tokens if stats.draft_tokens else float("nan")
                rates = ", ".join(f"{n / stats.drafts:.3f}" for n in stats.per_pos)
                log(lines.SPEC_WHERE, lines.spec_line(rate, 1 + stats.accepted / stats.drafts, stats.accepted,
                                                      stats.draft_tokens, rates, stats.accepted / elapsed,
                                                      stats.draft_tokens / elapsed))

    def prometheus(self) -> str:
        """The spec-decode counters as prometheus_client exposes vLLM's Counters (`_total`, `_created`)."""
        labels = f'model_name="{self.served}",engine="0"'
        with self.lock:
            s = self.total
            rows = [("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens, ""),
                    ("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens, "")]
            if self.draft is not None:
                rows += [("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.drafts, ""),
                         ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.draft_tokens, ""),
                         ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.accepted, "")]
                rows += [("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", n,
                          f',position="{p}"') for p, n in enumerate(s.per_pos)]
        out: list[str] = []
        for name in dict.fromkeys(row[0] for row in rows):
            mine = [row for row in rows if row[0] == name]
            out += [f"# HELP {name}_total {mine[0][1]}", f"# TYPE {name}_total counter"]
            out += [f"{name}_total{{{labels}{extra}}} {float(value)}" for _, _, value, extra in mine]
            out += [f"# HELP {name}_created {mine[0][1]}", f"# TYPE {name}_created gauge"]
            out += [f"{name}_created{{{labels}{extra}}} {START:.9e}" for _, _, _, extra in mine]
        return "\n".join(out) + "\n"


START = time.time()


def _id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{os.getpid()}{int(time.time() * 1e6)}"


def _text(tokens: list[int]) -> str:
    return "".join(f" t{t}" for t in tokens)


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None}
