"""The experiment's workload: its prompts, sent with bounded concurrency through the run's engine;
what it has measured so far, while it runs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.core.spec import Workload
from orchestrator.engines.base import HEADLINE, Engine, LogReport, RequestResult, ServerState, WorkloadResult
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


Progress = Callable[[WorkloadResult], None]  # told the requests completed so far, after each one


async def run(engine: Engine, base_url: str, workload: Workload, progress: Progress | None = None) -> WorkloadResult:
    """Send the workload with bounded concurrency (all asynchronous: no thread between the requests
    and the server); any failed request fails the workload."""
    limit = asyncio.Semaphore(workload.concurrency)
    started = time.monotonic()
    done: list[RequestResult] = []

    async def one(text: str) -> RequestResult:
        async with limit:
            sent = time.monotonic()
            result = await engine.request(base_url, text, workload.max_new_tokens, workload.temperature)
            result = dataclasses.replace(result, latency=time.monotonic() - sent)
        if progress is not None:
            done.append(result)
            progress(WorkloadResult(tuple(done), time.monotonic() - started))
        return result

    results = await asyncio.gather(*(one(t) for t in prompts(workload)))
    return WorkloadResult(tuple(results), time.monotonic() - started)


SO_FAR_EVERY_S = 0.5  # the measures so far are worked out at most this often


def so_far(engine: Engine, tell: Callable[..., None]) -> Progress:
    """A workload's progress as measures so far, told as `tell(accept_len=..., output_tok_s=...)`:
    from the completed requests alone (the server's stats and its log are read once it is done), so
    an engine whose accept length only those give tells tokens/s alone until then."""
    unread = ServerState(None, None)
    no_log = LogReport((), (), None, False, None)
    last = [-SO_FAR_EVERY_S]

    def on(result: WorkloadResult) -> None:
        if result.wall_seconds - last[0] < SO_FAR_EVERY_S:
            return
        last[0] = result.wall_seconds
        values: dict[str, Any] = {"output_tok_s": result.completion_tokens / max(result.wall_seconds, 1e-9)}
        measures = engine.measures(result, unread, unread, no_log).values
        headline = next((m.value for m in measures if m.name == HEADLINE and m.value is not None), None)
        if headline is not None:
            values[HEADLINE] = headline
        tell(**values)

    return on
