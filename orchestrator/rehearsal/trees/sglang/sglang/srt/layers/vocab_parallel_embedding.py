"""Embedding and LM head with SGLang's names."""

from __future__ import annotations

from sglang.srt._torch import nn
from sglang.srt.layers.linear import default_weight_loader


class VocabParallelEmbedding(nn.Embedding):
    def __init__(self, num_embeddings: int, embedding_dim: int, prefix: str = ""):
        super().__init__(num_embeddings, embedding_dim)
        self.weight.weight_loader = default_weight_loader


class ParallelLMHead(VocabParallelEmbedding):
    def forward(self, hidden_states):
        return hidden_states @ self.weight.T
