"""RMSNorm with SGLang's optional fused residual add."""

from __future__ import annotations

from sglang.srt import _torch as torch
from sglang.srt._torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon) * self.weight
        return x if residual is None else (x, residual)
