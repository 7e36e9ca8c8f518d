"""Linear layers with SGLang's names and shard-aware weight loaders (one rank: no sharding)."""

from __future__ import annotations

import numpy as np

from sglang.srt._torch import nn


def default_weight_loader(param, loaded_weight) -> None:
    if tuple(param.shape) != tuple(loaded_weight.shape):
        raise AssertionError(
            f"Attempted to load weight ({loaded_weight.shape}) into parameter ({param.shape})"
        )
    param.data[...] = loaded_weight.data.astype(param.data.dtype)


class _Linear(nn.Module):
    """y = x W^T; returns (output, bias) like SGLang's parallel linears."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False):
        self.input_size = input_size
        self.output_size = output_size
        bound = 1.0 / np.sqrt(input_size)
        # weights a checkpoint does not provide keep this init, like SGLang's uninitialised params
        init = np.random.default_rng(output_size * 7919 + input_size).uniform(-bound, bound, (output_size, input_size))
        self.weight = nn.Parameter(init.astype(np.float32))
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, loaded_weight, shard_id=None) -> None:
        default_weight_loader(param, loaded_weight)

    def forward(self, x):
        return x @ self.weight.T, None


class ReplicatedLinear(_Linear):
    pass


class RowParallelLinear(_Linear):
    pass


class ColumnParallelLinear(_Linear):
    pass


class MergedColumnParallelLinear(_Linear):
    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False):
        self.output_sizes = list(output_sizes)
        super().__init__(input_size, sum(output_sizes), bias)

    def weight_loader(self, param, loaded_weight, shard_id=None) -> None:
        if shard_id is None:
            return default_weight_loader(param, loaded_weight)
        start = sum(self.output_sizes[:shard_id])
        default_weight_loader(param.narrow(0, start, self.output_sizes[shard_id]), loaded_weight)


class QKVParallelLinear(_Linear):
    def __init__(self, hidden_size: int, head_size: int, total_num_heads: int, total_num_kv_heads: int, bias: bool = False):
        self.head_size = head_size
        self.q_size = total_num_heads * head_size
        self.kv_size = total_num_kv_heads * head_size
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias)

    def weight_loader(self, param, loaded_weight, shard_id=None) -> None:
        if shard_id is None:
            return default_weight_loader(param, loaded_weight)
        start, size = {"q": (0, self.q_size), "k": (self.q_size, self.kv_size), "v": (self.q_size + self.kv_size, self.kv_size)}[shard_id]
        default_weight_loader(param.narrow(0, start, size), loaded_weight)
