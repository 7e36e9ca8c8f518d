"""vLLM's Prometheus `/metrics` text -> its speculative-decoding counters, and the accept length
they give over a workload (the difference of a scrape before and one after).

The counters (0.10.1.1 `vllm/v1/spec_decode/metrics.py:146-173`, 0.33.0 `:228-262`) are
prometheus_client Counters named `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
`..._num_accepted_tokens` and `..._num_accepted_tokens_per_pos` (label `position`, "0" ..
num_speculative_tokens-1); the client exposes each as `<name>_total` (and `<name>_created`), with the
labels `model_name` and `engine` (`vllm/v1/metrics/loggers.py:168` 0.10.1.1, `:499` 0.33.0). The
accept length is vLLM's own: 1 + accepted / drafts (the bonus token counted), per position
accepted_per_pos / drafts (the docstring of `SpecDecodingProm`, `metrics.py:110-125` 0.10.1.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "vllm:spec_decode_"
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (PREFIX + n for n in (
    "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"))
# `name{label="v",...} value [timestamp]`; names may hold colons (vLLM's do)
_SAMPLE = re.compile(r'^(vllm:spec_decode_[a-z_]+?)(?:_total)?(?:\{([^}]*)\})?\s+(\S+)(?:\s+\d+)?\s*$', re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)
    found: bool = False  # any spec-decode counter in the scrape (vLLM exports none without speculation)

    def minus(self, before: SpecCounters) -> SpecCounters:
        """The counts added between `before` and this scrape."""
        return SpecCounters(
            self.drafts - before.drafts, self.draft_tokens - before.draft_tokens, self.accepted - before.accepted,
            {p: n - before.per_position.get(p, 0.0) for p, n in self.per_position.items()}, self.found)

    def accept_len(self) -> float | None:
        """1 + accepted / drafts, as vLLM computes its "Mean acceptance length"; None without drafts."""
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    def draft_accept_rate(self) -> float | None:
        """accepted / drafted tokens (a fraction; vLLM's log prints it as a percent)."""
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    def per_position_rates(self) -> tuple[float, ...]:
        if self.drafts <= 0:
            return ()
        return tuple(self.per_position[p] / self.drafts for p in sorted(self.per_position))


def parse(text: str) -> SpecCounters:
    """The spec-decode counters of one scrape, summed over engines and models (the `_created`
    samples are skipped: they are timestamps)."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    per_pos: dict[int, float] = {}
    found = False
    for name, labels, value in _SAMPLE.findall(text):
        if name.endswith("_created"):
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        if name == PER_POS:
            position = dict(_LABEL.findall(labels)).get("position")
            if position is not None and position.isdigit():
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + number
                found = True
        elif name in totals:
            totals[name] += number
            found = True
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED], per_pos, found)
