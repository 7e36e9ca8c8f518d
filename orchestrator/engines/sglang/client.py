"""The workload's requests to SGLang, streamed: the native `POST /generate` with `stream: true`
(http_server.py `generate_request`: `data: {...}` events, each with the text so far and its
`meta_info` — `completion_tokens` so far, and in the last one the speculative fields — ending
`data: [DONE]`), or OpenAI `/v1/chat/completions` (remote/streams.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from orchestrator.engines.base import CHAT, Call, RequestResult
from orchestrator.remote.streams import Timing, chunk_of, events, openai_stream

VERIFY_STEPS = "spec_verify_ct"
# meta_info's histogram of correct drafts per verify step: 0.5.23 `spec_correct_drafts_histogram`
# (batch_result_processor.py: one count per verify step of every EAGLE request, at the index of the
# draft tokens the target accepted in it, the bonus token not counted), 0.5.9 `spec_accept_histogram`.
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
GENERATE, CHAT_COMPLETIONS = "/generate", "/v1/chat/completions"
TURN_SEPARATOR = "\n\n"  # /generate takes plain text: a conversation's turns joined, no chat template


async def request(base_url: str, call: Call) -> RequestResult:
    if call.endpoint == CHAT:
        messages = [{"role": role, "content": content} for role, content in call.messages]
        streamed = await openai_stream(base_url, CHAT_COMPLETIONS, {"messages": messages,
                                                                    "max_tokens": call.max_new_tokens, **call.sampling})
        return RequestResult(*streamed[:3], ttft=streamed.ttft, itl=streamed.itl, text=streamed.text)
    payload = {"text": TURN_SEPARATOR.join(content for _, content in call.messages), "stream": True,
               "sampling_params": {"max_new_tokens": call.max_new_tokens, **call.sampling}}
    timing, text = Timing(time.monotonic()), ""
    meta: dict[str, Any] = {}
    async for at, data in events(base_url + GENERATE, payload):
        chunk = chunk_of(data, base_url + GENERATE)
        if chunk is None:
            continue
        if isinstance(chunk.get("meta_info"), dict):
            meta = chunk["meta_info"]
        if isinstance(chunk.get("text"), str) and chunk["text"]:
            text = chunk["text"]  # cumulative: each event holds the whole answer so far
            timing.chunk(at, int(meta.get("completion_tokens") or 0))
    completion, verify = int(meta.get("completion_tokens") or 0), meta.get(VERIFY_STEPS)
    steps = verify if isinstance(verify, int) and not isinstance(verify, bool) and verify > 0 else 0
    return RequestResult(
        prompt_tokens=int(meta.get("prompt_tokens") or 0), completion_tokens=completion,
        latency=time.monotonic() - timing.sent, counts={VERIFY_STEPS: steps} if steps else {},
        histogram=request_histogram(meta), ttft=timing.ttft, itl=tuple(timing.itl),
        accept_len=completion / steps if steps else None, text=text)


def request_histogram(meta: Mapping[str, object]) -> tuple[int, ...]:
    """The request's correct-drafts histogram (HISTOGRAM_KEYS), or () when absent or not a list of counts."""
    value = next((meta[key] for key in HISTOGRAM_KEYS if key in meta), None)
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value):
        return ()
    return tuple(value)
