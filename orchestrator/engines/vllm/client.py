"""The workload over vLLM's OpenAI APIs, streamed, and the /metrics scrape, on orch's asyncio HTTP
client (`orchestrator.remote.http`).

`POST /v1/completions` (the messages' text joined, no chat template) or `/v1/chat/completions`
(the server's template) with `model`, `max_tokens`, the sampling settings, `stream: true` and
`stream_options: {include_usage, continuous_usage_stats}`: each chunk's `choices[0].text` (or
`.delta.content`) and `usage` (serving_completion.py `completion_stream_generator`), then a
usage-only chunk and `data: [DONE]`. `model` must be a served name: it is read once from
`GET /v1/models` (`data[0].id`).
"""

from __future__ import annotations

from orchestrator.engines.base import CHAT, Call, RequestResult, ServerState
from orchestrator.remote.streams import OPENAI_MODELS as MODELS, openai_stream, served_model
from orchestrator.remote import http

from . import metrics

__all__ = ["COMPLETIONS", "CHAT_COMPLETIONS", "METRICS", "MODELS", "complete", "counters", "scrape", "served_model"]
COMPLETIONS, CHAT_COMPLETIONS, METRICS = "/v1/completions", "/v1/chat/completions", "/metrics"
TURN_SEPARATOR = "\n\n"  # completions take plain text: a conversation's turns joined


async def complete(base_url: str, call: Call) -> RequestResult:
    payload = {"max_tokens": call.max_new_tokens, **call.sampling}
    if call.endpoint == CHAT:
        streamed = await openai_stream(base_url, CHAT_COMPLETIONS, {
            **payload, "messages": [{"role": role, "content": content} for role, content in call.messages]})
    else:
        streamed = await openai_stream(base_url, COMPLETIONS, {
            **payload, "prompt": TURN_SEPARATOR.join(content for _, content in call.messages)})
    # vLLM's answer carries no per-request speculative counts: accept length comes from /metrics
    return RequestResult(*streamed[:3], ttft=streamed.ttft, itl=streamed.itl, text=streamed.text)


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
