"""The experiment's workload: its prompts, sent with bounded concurrency through the run's engine;
what it has measured so far, while it runs."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from orchestrator.core import datasets
from orchestrator.core.datasets import Conversation
from orchestrator.core.spec import Workload
from orchestrator.remote import streams
from orchestrator.engines.base import HEADLINE, Call, Engine, LogReport, RequestResult, ServerState, WorkloadResult

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
    return [c[0] for c in conversations(workload)]


def conversations(workload: Workload) -> list[Conversation]:
    """What to send: the dataset's conversations (drawn as `num_prompts` and `seed` say), or the
    prompts file's or built-in prompts cycled to `requests`, one turn each."""
    if workload.dataset is not None:
        return list(datasets.conversations(workload.dataset, workload.format, workload.num_prompts, workload.seed))
    texts = [c[0] for c in datasets.read(workload.prompts, "jsonl")] if workload.prompts else list(BUILT_IN_PROMPTS)
    return [(texts[i % len(texts)],) for i in range(workload.requests)]


def sampling(workload: Workload) -> dict[str, float | int]:
    """The sampling settings every request carries (temperature always, the others when set)."""
    found: dict[str, float | int] = {"temperature": workload.temperature}
    found.update({k: v for k, v in (("top_p", workload.top_p), ("top_k", workload.top_k)) if v is not None})
    return found


Progress = Callable[[WorkloadResult], None]  # told the requests completed so far, after each one


async def run(engine: Engine, base_url: str, workload: Workload, progress: Progress | None = None) -> WorkloadResult:
    """Send the workload with bounded concurrency (all asynchronous: no thread between the requests
    and the server), every request streamed; a conversation's later turn goes out after the answer
    to the one before, with it (MT-Bench's second turn). Any failed request fails the workload."""
    limit = asyncio.Semaphore(workload.concurrency)
    started = time.monotonic()
    done: list[RequestResult] = []
    settings = sampling(workload)
    streams.forget_served(base_url)  # this workload's server may serve another model than the last one here

    async def one(turns: Conversation) -> list[RequestResult]:
        messages: tuple[tuple[str, str], ...] = ()
        results = []
        for turn in turns:
            messages += (("user", turn),)
            async with limit:
                result = await engine.request(base_url, Call(messages, workload.max_new_tokens, settings,
                                                              workload.endpoint))
            messages += (("assistant", result.text),)
            result = dataclasses.replace(result, at=time.monotonic() - started)
            results.append(result)
            if progress is not None:
                done.append(result)
                progress(WorkloadResult(tuple(done), time.monotonic() - started))
        return results

    answered = await asyncio.gather(*(one(c) for c in conversations(workload)))
    return WorkloadResult(tuple(r for results in answered for r in results), time.monotonic() - started)


PERCENTILES = (50, 90, 99)


def percentile(values: list[float], p: float) -> float | None:
    """Linear between the closest ranks (numpy's default, as bench_serving reports); None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_metrics(result: WorkloadResult) -> dict[str, float | None]:
    """p50 / p90 / p99 of time to first token, inter-token latency (every token's gap of every
    request) and end-to-end latency, in ms; request and total token throughput."""
    samples = {"ttft_ms": [r.ttft * 1000 for r in result.requests if r.ttft is not None],
               "itl_ms": [gap * 1000 for r in result.requests for gap in r.itl],
               "e2e_ms": [r.latency * 1000 for r in result.requests]}
    found: dict[str, float | None] = {f"{name}_p{p}": percentile(values, p)
                                      for name, values in samples.items() for p in PERCENTILES}
    wall = result.wall_seconds
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in result.requests)
    found["request_throughput"] = len(result.requests) / wall if wall else None
    found["total_tok_s"] = tokens / wall if wall else None
    return found


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
