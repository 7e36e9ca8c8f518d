"""The rehearsal target as vLLM's runner sees it: the aux hidden states the draft reads and the
true next tokens, from the teacher shared with the SGLang rehearsal (`teacher.py`, copied into this
tree from the SGLang one when orch assembles it)."""

from __future__ import annotations

import numpy as np

from vllm._rehearsal.teacher import Oracle


class Target(Oracle):
    """The target model, built from its config.json's `text_config` (sizes and seed)."""

    def __init__(self, text_config: dict):
        n = int(text_config["num_hidden_layers"])
        super().__init__(int(text_config["hidden_size"]), int(text_config["intermediate_size"]), n,
                         int(text_config["vocab_size"]), int(text_config["rehearsal_draft_vocab_size"]),
                         int(text_config["seed"]), float(text_config.get("rms_norm_eps", 1e-5)),
                         int(text_config.get("rehearsal_surprise_per_mille", 40)))
        self.num_layers = n

    def aux_hidden_states(self, token: int, layers: tuple[int, ...]) -> np.ndarray:
        """The inputs of the given decoder layers for one token, concatenated (vLLM's llama.py
        captures `hidden_states + residual` before layer idx runs)."""
        state, captured = self.embed[token], []
        for idx, rotation in enumerate(self.rotations):
            if idx in layers:
                captured.append(state)
            state = state @ rotation
        return np.concatenate(captured)

    def last_hidden_state(self, token: int) -> np.ndarray:
        """The last decoder layer's output for one token: what the draft reads without aux capture."""
        state = self.embed[token]
        for rotation in self.rotations:
            state = state @ rotation
        return state

    def next_token(self, context: list[int]) -> int:
        return self.next_token_ids([context])[0]
