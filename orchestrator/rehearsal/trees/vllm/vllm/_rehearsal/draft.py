"""The loaded EAGLE-3 draft, run on numpy: what each release's `llama_eagle3.py` hands the proposer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vllm._rehearsal.teacher import draft_layer


@dataclass
class Draft:
    weights: dict[str, np.ndarray]  # by layers.0.* / norm.weight / lm_head.weight names (shards unstacked)
    draft_id_to_target_id: np.ndarray  # offsets: target id = draft id + offset
    uses_fc: bool  # False: the draft reads the target's last hidden state as is (no aux capture)
    eps: float

    def combine_hidden_states(self, hidden_states: np.ndarray) -> np.ndarray:
        """fc over the concatenated aux hidden states (vLLM's `combine_hidden_states`)."""
        return hidden_states @ self.weights["fc.weight"].T if self.uses_fc else hidden_states

    def propose(self, embeds: np.ndarray, hidden: np.ndarray) -> tuple[int, np.ndarray]:
        """(proposed target token id, the hidden state for the next draft step)."""
        logits, prenorm = draft_layer(self.weights, embeds, hidden, self.eps)
        draft_id = int(np.argmax(logits))
        return draft_id + int(self.draft_id_to_target_id[draft_id]), prenorm


def size(shape) -> str:
    """A shape as torch prints it in vLLM's messages."""
    return f"torch.Size([{', '.join(str(n) for n in shape)}])"


def check_shape(name: str, want: tuple[int, ...], tensor: np.ndarray) -> None:
    """`default_weight_loader`'s assertion (vllm/model_executor/model_loader/weight_utils.py)."""
    if tuple(want) != tuple(tensor.shape):
        raise AssertionError(f"Attempted to load weight ({size(tensor.shape)}) into parameter ({size(want)})")
