"""The logits step: last hidden state -> vocabulary scores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LogitsProcessorOutput:
    next_token_logits: object
    hidden_states: object = None


class LogitsProcessor:
    def __init__(self, config):
        self.config = config

    def __call__(self, input_ids, hidden_states, lm_head, aux_hidden_states=None):
        return LogitsProcessorOutput(next_token_logits=lm_head(hidden_states), hidden_states=aux_hidden_states)
