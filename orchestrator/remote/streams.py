"""Streamed requests: the OpenAI-compatible streams SGLang and vLLM both serve, and the timing of
any stream, with no record of the engine seam (remote/ sits below it: each engine makes its
RequestResult of a `Streamed`).

A streamed answer is timed as SGLang's `bench_serving` times it: time to first token at the first
chunk with text, then each later chunk's gap spread evenly over the tokens it added (a verify
step of speculative decoding delivers several at once)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from orchestrator.errors import WorkloadError
from orchestrator.remote import http, sse

REQUEST_TIMEOUT_S = 600.0  # one request, first byte to last


@dataclass
class Timing:
    sent: float  # time.monotonic() when the request went out
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    last_at: float = 0.0
    last_tokens: int = 0

    def chunk(self, at: float, tokens: int) -> None:
        """A chunk that arrived at `at` carrying text, the answer now `tokens` long (a count the
        server gives, or one per chunk where it gives none)."""
        if self.ttft is None:
            self.ttft = at - self.sent
        elif tokens > self.last_tokens:
            gap = (at - self.last_at) / (tokens - self.last_tokens)
            self.itl.extend([gap] * (tokens - self.last_tokens))
        else:
            return  # no new token: the gap runs on to the next chunk that brings one
        self.last_at, self.last_tokens = at, max(tokens, self.last_tokens)


class Streamed(NamedTuple):
    prompt_tokens: int
    completion_tokens: int
    latency: float  # seconds, sent to the last event
    ttft: float | None
    itl: tuple[float, ...]
    text: str


OPENAI_MODELS = "/v1/models"
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}  # each chunk's usage: tokens so far
_served: dict[str, str] = {}


def forget_served(base_url: str) -> None:
    """Read the served name again at the next request: another server (another model) may answer
    at the same address now, as a sweep's next variant on the same port does."""
    _served.pop(base_url, None)


async def served_model(base_url: str) -> str:
    """The served model's name (`data[0].id` of /v1/models), read once per workload (`forget_served`)."""
    if base_url not in _served:
        status, body = await http.get(base_url + OPENAI_MODELS, 10.0)
        try:
            _served[base_url] = str(json.loads(body)["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise WorkloadError(f"{base_url}{OPENAI_MODELS} did not name a served model (HTTP {status})") from None
    return _served[base_url]


async def openai_stream(base_url: str, path: str, payload: dict[str, Any]) -> Streamed:
    """An OpenAI completions or chat completions stream (SGLang's and vLLM's alike): text from
    `choices[0].text` or `.delta.content`, tokens so far from each chunk's `usage` (one a chunk
    where it has none), the last usage as the request's counts."""
    payload = {**payload, "model": await served_model(base_url), "stream": True, "stream_options": STREAM_OPTIONS}
    timing, text, chunks = Timing(time.monotonic()), "", 0
    usage: dict[str, Any] = {}
    async for at, data in events(base_url + path, payload):
        chunk = chunk_of(data, base_url + path)
        if chunk is None:
            continue  # [DONE]: the server closes next
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        piece = _piece(chunk)
        if piece:
            chunks, text = chunks + 1, text + piece
            timing.chunk(at, int(usage.get("completion_tokens") or 0) if usage else chunks)
    if not usage:
        raise WorkloadError(f"{base_url}{path} answered without `usage`")
    return Streamed(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or chunks),
                    time.monotonic() - timing.sent, timing.ttft, tuple(timing.itl), text)


def _piece(chunk: dict[str, Any]) -> str:
    """The text a completions (`choices[0].text`) or chat (`choices[0].delta.content`) chunk adds."""
    choices = chunk.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = choice.get("delta")
    delta = delta if isinstance(delta, dict) else choice
    piece = delta.get("text") if "text" in delta else delta.get("content")
    return piece if isinstance(piece, str) else ""


async def events(url: str, payload: dict[str, Any]) -> AsyncIterator[tuple[float, str]]:
    """The stream's `data:` payloads, as WorkloadError when the request fails or outlasts
    REQUEST_TIMEOUT_S (each wait bounded by what is left: a timeout scope cannot span a yield)."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    stream = sse.post_events(url, payload)
    try:
        while True:
            try:
                yield await asyncio.wait_for(anext(stream), max(deadline - time.monotonic(), 0.001))
            except StopAsyncIteration:
                return
            except http.HTTPError as exc:
                raise WorkloadError(f"{url} failed: {exc}") from None
            except TimeoutError:
                raise WorkloadError(f"{url} failed: no whole answer within {REQUEST_TIMEOUT_S:.0f} s") from None
    finally:
        await stream.aclose()


def chunk_of(data: str, where: str) -> dict[str, Any] | None:
    """One event's JSON object; None at `[DONE]`; WorkloadError for an error event or no JSON."""
    if data == "[DONE]":
        return None
    try:
        chunk = json.loads(data)
    except ValueError:
        raise WorkloadError(f"{where} streamed an event that is not JSON: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise WorkloadError(f"{where} streamed an event that is not an object: {data[:80]!r}")
    error = chunk.get("error") or (chunk.get("message") if chunk.get("object") == "error" else None)
    if error:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise WorkloadError(f"{where} failed: {message}")
    return chunk
