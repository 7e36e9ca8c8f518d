"""Every number that shapes the models; part of the cache key, so changing one makes new models."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    # the language: words of a 512-entry vocabulary, of which only some are spoken (see language.py)
    vocab_size: int = 512
    rules: int = 4
    spoken_words: int = 64
    sequence_length: int = 80
    # the target: head_dim 64, since the CPU attention kernels refuse small head sizes (16 crashes)
    hidden_size: int = 256
    heads: int = 4
    layers: int = 8
    intermediate_size: int = 512
    max_positions: int = 512
    target_steps: int = 150
    target_batch: int = 16
    target_lr: float = 3e-3
    # the draft
    draft_vocab_size: int = 256
    draft_intermediate_size: int = 512
    aux_layers: tuple[int, ...] = (2, 4, 5)  # the serving engine's default for 8 layers: (2, L // 2, L - 3)
    draft_sequences: int = 256
    draft_steps: int = 150
    draft_batch: int = 32
    draft_lr: float = 3e-3
    unroll: int = 3  # draft steps trained together, as many as the speculative tokens it serves
    threads: int = 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
