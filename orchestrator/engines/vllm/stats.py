"""vLLM's periodic stats log lines -> records: one per "SpecDecoding metrics:" line and one per
throughput ("Avg prompt throughput: ...") line.

The formats, per release:
- 0.10.1.1 `vllm/v1/spec_decode/metrics.py:87`: `SpecDecoding metrics: Draft acceptance rate: 69.2%,
  Mean acceptance length: 3.08, Accepted: 1234 tokens, Drafted: 1782 tokens, Per-position
  acceptance rate: 0.853, 0.692, 0.536`
- 0.33.0 `vllm/v1/spec_decode/metrics.py:120`: `SpecDecoding metrics: Mean acceptance length: 3.08,
  Accepted throughput: 12.30 tokens/s, Drafted throughput: 17.82 tokens/s, Accepted: 1234 tokens,
  Drafted: 1782 tokens, Per-position acceptance rate: 0.853, 0.692, 0.536, Avg Draft acceptance
  rate: 69.2%`
- throughput, 0.10.1.1 `vllm/v1/metrics/loggers.py:123` / 0.33.0 `loggers.py:335`: `Engine 000: Avg
  prompt throughput: 1.2 tokens/s, Avg generation throughput: 4.5 tokens/s, Running: 1 reqs,
  Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%` (0.33 may add
  `Deferred:`, `Preemptions:`, ... between them; fields are taken by name).
Both are printed by vLLM's logger (`vllm/logger.py:24` 0.10.1.1, `:28` 0.33.0):
`(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message` (the process prefix is written by
`decorate_logs`, 0.10.1.1 `vllm/utils/__init__.py:3350`, or by the formatter itself in 0.33.0).
vLLM computes the mean acceptance length as 1 + accepted / drafts and each per-position rate as
accepted at that position / drafts (0.32.0 `vllm/v1/spec_decode/metrics.py:114,117`, over the
interval's `SpecDecodingStats`), and prints no draft count. A draft proposes num_speculative_tokens
tokens, one per printed per-position rate, so the drafts of an interval are its drafted tokens / that
number (exact while every draft is whole; the exact counters come from /metrics, `metrics.py` in
this package); without the rates nor the launch's num_speculative_tokens, accepted / (mean - 1),
which the mean's two printed decimals make approximate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

SPEC_HEADER = "SpecDecoding metrics: "
THROUGHPUT_HEADER = "Avg prompt throughput: "
_NUMBER = r"(?:\d+(?:\.\d+)?|nan|inf)"
_SPEC_FIELDS = {
    "mean_accept_len": (re.compile(rf"Mean acceptance length: ({_NUMBER})"), float),
    "accepted": (re.compile(r"Accepted: (\d+) tokens"), int),
    "drafted": (re.compile(r"Drafted: (\d+) tokens"), int),
    "draft_accept_rate": (re.compile(rf"Draft acceptance rate: ({_NUMBER})%"), float),  # percent
    "accepted_throughput": (re.compile(rf"Accepted throughput: ({_NUMBER}) tokens/s"), float),
    "drafted_throughput": (re.compile(rf"Drafted throughput: ({_NUMBER}) tokens/s"), float),
}
_PER_POSITION = re.compile(rf"Per-position acceptance rate: ({_NUMBER}(?:, {_NUMBER})*)")
_THROUGHPUT_FIELDS = {
    "prompt_throughput": (re.compile(rf"Avg prompt throughput: ({_NUMBER}) tokens/s"), float),
    "generation_throughput": (re.compile(rf"Avg generation throughput: ({_NUMBER}) tokens/s"), float),
    "running": (re.compile(r"Running: (\d+) reqs"), int),
    "waiting": (re.compile(r"Waiting: (\d+) reqs"), int),
    "kv_cache_usage": (re.compile(rf"KV cache usage: ({_NUMBER})%"), float),  # percent
    "prefix_cache_hit_rate": (re.compile(rf"Prefix cache hit rate: ({_NUMBER})%"), float),
}
_ENGINE = re.compile(r"Engine (\d+): $")
# `(APIServer pid=12) INFO 08-20 10:00:06 [loggers.py:123] ` (the time may carry `.mmm` with a
# custom VLLM_LOGGING_CONFIG_PATH; ANSI colours appear when the server wrote to a terminal).
_PREFIX = re.compile(r"(?:\((?P<process>[^()\s]+) pid=(?P<pid>\d+)\)\s*)?(?:[A-Z]+\s+)?"
                     r"(?P<time>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)?\s*(?:\[(?P<where>[^\]\s]+:\d+)\]\s*)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def spec_row(prefix: str, body: str) -> dict[str, object]:
    """One "SpecDecoding metrics:" line (text before the header, text after it) -> a row. Absent
    fields are None (each release prints a different subset)."""
    row: dict[str, object] = _prefix_fields(prefix)
    for name, (pattern, convert) in _SPEC_FIELDS.items():
        found = pattern.search(body)
        row[name] = convert(found.group(1)) if found else None
    rates = _PER_POSITION.search(body)
    row["per_position"] = tuple(float(x) for x in rates.group(1).split(", ")) if rates else ()
    return row


def throughput_row(prefix: str, body: str) -> dict[str, object]:
    """One throughput line (text before "Avg prompt throughput: ", the line from there) -> a row."""
    row: dict[str, object] = _prefix_fields(prefix)
    engine = _ENGINE.search(prefix)
    row["engine"] = int(engine.group(1)) if engine else None
    for name, (pattern, convert) in _THROUGHPUT_FIELDS.items():
        found = pattern.search(body)
        row[name] = convert(found.group(1)) if found else None
    return row


def _prefix_fields(prefix: str) -> dict[str, object]:
    found = _PREFIX.match(_ANSI.sub("", prefix))
    if found is None:  # the pattern matches the empty string: never None, kept for the type checker
        return {"time": None, "process": None, "where": None}
    return {"time": found.group("time"), "process": found.group("process"), "where": found.group("where")}


class SpecTotals(NamedTuple):
    accept_len: float | None  # 1 + sum(accepted) / sum(drafts), as /metrics' counters give it
    accept_rate: float | None  # sum(accepted) / sum(drafted): a fraction
    note: str  # how the drafts were counted


def weighted_spec(rows: Sequence[dict[str, object]], num_speculative_tokens: int | None = None) -> SpecTotals:
    """The run's accept length and draft acceptance over its SpecDecoding lines, each interval
    weighted by its drafts (a plain mean of the intervals' means weighs a nearly idle interval like a
    busy one)."""
    rates = [r.get("per_position") for r in rows]
    per_draft = next((len(r) for r in rates if isinstance(r, tuple) and r), None) or num_speculative_tokens
    accepted = drafted = counted = 0
    drafts = 0.0
    for row in rows:
        found = _drafts(row, per_draft)
        if found is None:
            continue
        drafts, accepted, drafted, counted = drafts + found[0], accepted + found[1], drafted + found[2], counted + 1
    how = f"drafted / {per_draft} tokens a draft" if per_draft else "accepted / (mean - 1)"
    return SpecTotals(1 + accepted / drafts if drafts > 0 else None, accepted / drafted if drafted > 0 else None,
                      f"1 + sum(accepted) / sum(drafts) of {counted} SpecDecoding-line intervals (drafts: {how})")


def _drafts(row: dict[str, object], per_draft: int | None) -> tuple[float, int, int] | None:
    """(drafts, accepted tokens, drafted tokens) of one line; None for a line without its counts."""
    accepted, drafted, mean = row.get("accepted"), row.get("drafted"), row.get("mean_accept_len")
    if not isinstance(accepted, int) or not isinstance(drafted, int):
        return None
    if per_draft:
        return drafted / per_draft, accepted, drafted
    if isinstance(mean, float) and mean > 1:
        return accepted / (mean - 1), accepted, drafted
    return None
