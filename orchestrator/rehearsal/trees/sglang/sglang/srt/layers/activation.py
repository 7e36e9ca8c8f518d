"""SiLU-and-multiply, the gated MLP activation."""

from __future__ import annotations

from sglang.srt._torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return nn.functional.silu(x[..., :d]) * x[..., d:]
