"""The tiny Llama target: trained on the language until its greedy continuation follows the rule."""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

import torch

from . import language as lang
from .settings import Settings


def config(settings: Settings, layers: int | None = None):  # -> transformers.LlamaConfig
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=settings.vocab_size, hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size, num_hidden_layers=layers or settings.layers,
        num_attention_heads=settings.heads, num_key_value_heads=settings.heads,
        head_dim=settings.hidden_size // settings.heads, max_position_embeddings=settings.max_positions,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=lang.BOS, eos_token_id=lang.EOS, pad_token_id=lang.PAD,
    )


def batch(language: lang.Language, rng: random.Random, size: int) -> torch.Tensor:
    return torch.tensor([language.sentence(rng) for _ in range(size)])


def train(settings: Settings, language: lang.Language):  # -> transformers.LlamaForCausalLM (fp32)
    from transformers import LlamaForCausalLM

    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed + 1)
    model = LlamaForCausalLM(config(settings))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.target_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(settings.target_steps))
    started = time.monotonic()
    model.train()
    for step in range(settings.target_steps):
        ids = batch(language, rng, settings.target_batch)
        labels = ids.clone()
        labels[:, :2] = -100  # the first word after the rule is a free choice: nothing to learn there
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == settings.target_steps - 1:
            print(f"target step {step}: loss {loss.item():.4f} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    model.eval()
    return model


def follows_rule(model, language: lang.Language, seed: int, count: int = 64) -> float:
    """The share of next-word predictions, after the prompt's first word, that follow the rule."""
    ids = batch(language, random.Random(seed), count)
    with torch.no_grad():
        guess = model(input_ids=ids).logits.argmax(-1)
    return (guess[:, 1:-1] == ids[:, 2:]).float().mean().item()


def save(model, language: lang.Language, folder: Path) -> None:
    """bf16 safetensors, as the CPU engine serves it well (the CPU has AVX-512 bf16)."""
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    lang.save_tokenizer(language, folder)


def _warmup_cosine(steps: int):
    warmup = max(1, steps // 10)
    return lambda step: min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))
