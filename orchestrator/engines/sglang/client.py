"""Requests to the server's /generate, and the accept length they report."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.remote import http
from orchestrator.errors import SpecError, WorkloadError
from orchestrator.core.spec import Workload

# meta_info's histogram of correct drafts per verify step: 0.5.23 `spec_correct_drafts_histogram`
# (batch_result_processor.py: one count per verify step of every EAGLE request, at the index of the
# draft tokens the target accepted in it, the bonus token not counted), 0.5.9 `spec_accept_histogram`.
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
CORRECT_DRAFTS = "correct_drafts_histogram"
CORRECT_DRAFTS_NOTE = ("verify steps by draft tokens accepted (index 0, 1, ...; bonus token not counted), "
                       "summed over the workload's requests")

BUILT_IN_PROMPTS = (
    "Explain speculative decoding to a new engineer in three sentences.",
    "Write a Python function that merges two sorted lists.",
    "What are the trade-offs of tensor parallelism across eight GPUs?",
    "Summarize the plot of a heist movie set on a cargo ship.",
    "List five checks to run before serving a new draft model.",
    "Translate 'the cache was flushed before the benchmark' into French.",
    "Describe how an EAGLE draft head reuses the target's hidden states.",
    "Give a recipe for a quick weeknight pasta with what is in the fridge.",
)


@dataclass(frozen=True)
class RequestResult:
    prompt_tokens: int
    completion_tokens: int
    spec_verify_ct: int | None
    spec_accept_length: float | None
    latency: float
    correct_drafts_histogram: tuple[int, ...] = ()  # see HISTOGRAM_KEYS; empty when the server sent none


@dataclass(frozen=True)
class WorkloadResult:
    requests: tuple[RequestResult, ...]
    wall_seconds: float

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def accept_len(self) -> float | None:
        """Token-weighted: sum(completion_tokens) / sum(spec_verify_ct). Works on 0.4.x, where
        meta_info carries only spec_verify_ct."""
        verified = [r for r in self.requests if r.spec_verify_ct]
        if not verified:
            return None
        return sum(r.completion_tokens for r in verified) / sum(r.spec_verify_ct or 0 for r in verified)

    @property
    def correct_drafts_histogram(self) -> list[int] | None:
        """The requests' histograms added bin by bin (they differ in length: each grows to the most
        drafts one of its steps accepted); None when no request carried one."""
        histograms = [r.correct_drafts_histogram for r in self.requests if r.correct_drafts_histogram]
        if not histograms:
            return None
        total = [0] * max(map(len, histograms))
        for histogram in histograms:
            for drafts, steps in enumerate(histogram):
                total[drafts] += steps
        return total


def prompts(workload: Workload) -> list[str]:
    """The prompts to send: the built-in set, or one per line of a JSONL file (a string, or an
    object with `text` or `prompt`), cycled to `requests`."""
    texts = list(BUILT_IN_PROMPTS)
    if workload.prompts:
        texts = []
        for number, line in enumerate(Path(workload.prompts).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{workload.prompts}:{number}: not JSON ({exc.msg}); one prompt per line") from None
            text = item if isinstance(item, str) else item.get("text", item.get("prompt")) if isinstance(item, dict) else None
            if not isinstance(text, str):
                raise SpecError(f"{workload.prompts}:{number}: expected a string or an object with `text`")
            texts.append(text)
        if not texts:
            raise SpecError(f"{workload.prompts}: no prompts in the file")
    return [texts[i % len(texts)] for i in range(workload.requests)]


async def run(base_url: str, workload: Workload) -> WorkloadResult:
    """Send the workload with bounded concurrency; any failed request fails the workload."""
    limit = asyncio.Semaphore(workload.concurrency)
    started = time.monotonic()

    async def one(text: str) -> RequestResult:
        async with limit:
            return await _generate(base_url, text, workload)

    results = await asyncio.gather(*(one(t) for t in prompts(workload)))
    return WorkloadResult(tuple(results), time.monotonic() - started)


async def _generate(base_url: str, text: str, workload: Workload) -> RequestResult:
    payload = {
        "text": text,
        "sampling_params": {"max_new_tokens": workload.max_new_tokens, "temperature": workload.temperature},
    }
    started = time.monotonic()
    try:
        body = await http.post_json(f"{base_url}/generate", payload)
    except http.HTTPError as exc:
        raise WorkloadError(f"{base_url}/generate failed: {exc}") from None
    meta: dict[str, Any] = body.get("meta_info", {}) if isinstance(body, dict) else {}
    return RequestResult(
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)),
        spec_verify_ct=meta.get("spec_verify_ct"),
        spec_accept_length=meta.get("spec_accept_length"),
        latency=time.monotonic() - started,
        correct_drafts_histogram=_histogram(meta),
    )


def _histogram(meta: dict[str, Any]) -> tuple[int, ...]:
    """The request's correct-drafts histogram (HISTOGRAM_KEYS), or () when absent or not a list of counts."""
    value = next((meta[key] for key in HISTOGRAM_KEYS if key in meta), None)
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value):
        return ()
    return tuple(value)


async def server_info(base_url: str) -> tuple[dict[str, Any] | None, str | None]:
    """`/server_info` (0.5.9+) or `/get_server_info` (older); the body and the endpoint used."""
    for endpoint in ("/server_info", "/get_server_info"):
        status, body = await http.get(base_url + endpoint, 10.0)
        if status == 200:
            try:
                return json.loads(body), endpoint
            except json.JSONDecodeError:
                return None, endpoint
    return None, None


def avg_spec_accept_length(info: dict[str, Any] | None) -> float | None:
    """internal_states[0].avg_spec_accept_length; absent until the first decode-log interval."""
    if not info:
        return None
    if "decode" in info and isinstance(info["decode"], list) and info["decode"]:
        info = info["decode"][0]
    states = info.get("internal_states") or [{}]
    value = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    return float(value) if value is not None else None
