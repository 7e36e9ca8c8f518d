"""The workload over vLLM's OpenAI completions API and the /metrics scrape, on orch's asyncio HTTP
client (`orchestrator.remote.http`).

`POST /v1/completions` with `model`, `prompt`, `max_tokens`, `temperature`; the answer's
`choices[0].text` and `usage.prompt_tokens` / `usage.completion_tokens` (vLLM's
`CompletionResponse`, entrypoints/openai/protocol.py). `model` must be a served name: it is read
once from `GET /v1/models` (`data[0].id`).
"""

from __future__ import annotations

import json
import time

from orchestrator.engines.base import RequestResult, ServerState
from orchestrator.errors import WorkloadError
from orchestrator.remote import http

from . import metrics

COMPLETIONS, MODELS, METRICS = "/v1/completions", "/v1/models", "/metrics"
_served: dict[str, str] = {}


async def served_model(base_url: str) -> str:
    if base_url not in _served:
        status, body = await http.get(base_url + MODELS, 10.0)
        try:
            _served[base_url] = str(json.loads(body)["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise WorkloadError(f"{base_url}{MODELS} did not name a served model (HTTP {status})") from None
    return _served[base_url]


async def complete(base_url: str, prompt: str, max_tokens: int, temperature: float) -> RequestResult:
    payload = {"model": await served_model(base_url), "prompt": prompt, "max_tokens": max_tokens,
               "temperature": temperature}
    started = time.monotonic()
    try:
        body = await http.post_json(base_url + COMPLETIONS, payload)
    except http.HTTPError as exc:
        raise WorkloadError(f"{base_url}{COMPLETIONS} failed: {exc}") from None
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        raise WorkloadError(f"{base_url}{COMPLETIONS} answered without `usage`")
    return RequestResult(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                         time.monotonic() - started)


async def scrape(base_url: str) -> ServerState:
    """The spec-decode counters of one /metrics scrape (body None when the server gave none)."""
    status, body = await http.get(base_url + METRICS, 10.0)
    if status != 200:
        return ServerState(None, METRICS)
    found = metrics.parse(body.decode("utf-8", "replace"))
    return ServerState({"drafts": found.drafts, "draft_tokens": found.draft_tokens, "accepted": found.accepted,
                        "per_position": dict(found.per_position), "found": found.found}, METRICS)


def counters(state: ServerState) -> metrics.SpecCounters:
    body = state.body or {}
    per = body.get("per_position")
    return metrics.SpecCounters(float(body.get("drafts") or 0), float(body.get("draft_tokens") or 0),
                                float(body.get("accepted") or 0),
                                {int(k): float(v) for k, v in per.items()} if isinstance(per, dict) else {},
                                bool(body.get("found")))
