"""The experiment's workload: its prompts, sent with bounded concurrency through the run's engine."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

from orchestrator.core.spec import Workload
from orchestrator.engines.base import Engine, RequestResult, WorkloadResult
from orchestrator.errors import SpecError

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


async def run(engine: Engine, base_url: str, workload: Workload) -> WorkloadResult:
    """Send the workload with bounded concurrency (all asynchronous: no thread between the requests
    and the server); any failed request fails the workload."""
    limit = asyncio.Semaphore(workload.concurrency)
    started = time.monotonic()

    async def one(text: str) -> RequestResult:
        async with limit:
            sent = time.monotonic()
            result = await engine.request(base_url, text, workload.max_new_tokens, workload.temperature)
            return dataclasses.replace(result, latency=time.monotonic() - sent)

    results = await asyncio.gather(*(one(t) for t in prompts(workload)))
    return WorkloadResult(tuple(results), time.monotonic() - started)
