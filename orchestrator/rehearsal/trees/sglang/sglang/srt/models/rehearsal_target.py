"""The rehearsal targets: stand-in model classes whose weights and "true" next-token function
come from the teacher in `srt/rehearsal_teacher.py` (numpy, shared with the vLLM rehearsal), built
from config.json's seed. `build_teacher` is also what make_checkpoints.py writes the drafts from
(the teacher plus noise, from the same seed).
"""

from __future__ import annotations

import numpy as np

from sglang.srt import _torch as torch
from sglang.srt._torch import nn
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from sglang.srt.rehearsal_teacher import Oracle, build_teacher  # noqa: F401  (make_checkpoints.py imports it here)


def oracle_of(config) -> Oracle:
    """The target's next-token function, from its config.json (the teacher math is shared with the
    vLLM rehearsal: `srt/rehearsal_teacher.py`)."""
    return Oracle(config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size,
                  config.rehearsal_draft_vocab_size, config.seed, getattr(config, "rms_norm_eps", 1e-5),
                  getattr(config, "rehearsal_surprise_per_mille", 40))


class RehearsalDecoderLayer(nn.Module):
    """Stands in for a full decoder layer: an orthogonal mixing of the hidden state."""

    def __init__(self, hidden_size: int):
        self.weight = nn.Parameter(np.eye(hidden_size, dtype=np.float32))

    def forward(self, hidden_states):
        return hidden_states @ self.weight


class RehearsalTextModel(nn.Module):
    """Embedding, decoder stack and final norm; captures aux hidden states like SGLang's models."""

    def __init__(self, config):
        self.config = config
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([RehearsalDecoderLayer(config.hidden_size) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=getattr(config, "rms_norm_eps", 1e-5))
        self.layers_to_capture = []

    def forward(self, input_ids, positions=None, forward_batch=None):
        hidden_states = self.embed_tokens(input_ids)
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = layer(hidden_states)
        hidden_states = self.norm(hidden_states)
        return hidden_states, aux_hidden_states


class RehearsalCausalLM(nn.Module):
    """What the model runner needs from a target: hidden states for the draft, true next tokens."""

    def __init__(self, config, quant_config=None, prefix: str = ""):
        self.config = config
        self.model = RehearsalTextModel(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        self.capture_aux_hidden_states = False
        self.oracle = None

    def load_weights(self, weights=()) -> None:
        """Targets ship no weight files: the stand-in weights come from config.json's seed."""
        self.oracle = oracle_of(self.config)
        self.model.embed_tokens.weight.data[...] = self.oracle.embed
        for layer, rotation in zip(self.model.layers, self.oracle.rotations):
            layer.weight.data[...] = rotation
        # the full-vocabulary head: the teacher's rows at the draft vocabulary's ids, zero elsewhere
        self.lm_head.weight.data[...] = 0
        self.lm_head.weight.data[self.oracle.hot] = self.oracle.teacher["lm_head.weight"]

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def forward(self, input_ids, positions=None, forward_batch=None):
        """Hidden states handed to the draft: the captured layers, else the last layer."""
        hidden_states, aux_hidden_states = self.model(input_ids, positions, forward_batch)
        if self.capture_aux_hidden_states:
            return torch.cat(aux_hidden_states, dim=-1)
        return hidden_states

    def next_token_ids(self, contexts: list[list[int]]) -> list[int]:
        return self.oracle.next_token_ids(contexts)


def text_model(model) -> RehearsalCausalLM:
    """The text model inside a target (a multimodal class keeps it as `language_model`): what the
    rehearsal asks for the true next tokens."""
    return getattr(model, "language_model", None) or model
