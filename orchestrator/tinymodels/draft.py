"""The EAGLE-3 draft: trained on the target's own aux-layer hidden states and greedy continuations,
saved in the SpecForge layout the serving engine loads (`midlayer.*`, `fc` [H, 3H], `d2t` offsets,
`t2d`, a 256-word `lm_head`; no `embed_tokens`: the engine shares the target's).

The forward is the one the engine computes (its llama_eagle3.py and the proposer's loop, read in the
installed 0.32.0): for the target's hidden states h_t at position t (the residual stream entering
each aux layer, concatenated) and the next token x_{t+1},

    hidden = fc(h_t);  x = cat(input_layernorm(embed(x_{t+1})), hidden_norm(hidden))
    residual = hidden + o_proj(attention(q, k, v of x, at position t))
    residual = residual + mlp(post_attention_layernorm(residual))
    logits = lm_head(norm(residual)) over the draft vocabulary, mapped to target ids by d2t

and each later draft step feeds its own `residual` (the pre-norm output) back as the hidden state, the
token it drafted as the input, at position t + 1, t + 2, ...: that step's query sees the cache of the
first pass up to t and the entries of its own chain. Training unrolls those steps (test-time training)
with exactly that attention pattern, so the 2nd and 3rd drafted tokens are accepted too.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

from . import language as lang
from . import target as tgt
from .settings import Settings

ARCHITECTURE = "LlamaForCausalLMEagle3"


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Draft(nn.Module):
    def __init__(self, settings: Settings, embed: torch.Tensor):
        super().__init__()
        H, I, heads = settings.hidden_size, settings.draft_intermediate_size, settings.heads
        self.heads, self.head_dim = heads, H // heads
        self.register_buffer("embed", embed.float(), persistent=False)  # the target's, frozen
        self.fc = nn.Linear(len(settings.aux_layers) * H, H, bias=False)
        self.input_layernorm, self.hidden_norm = RMSNorm(H), RMSNorm(H)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(2 * H, H, bias=False) for _ in range(3))
        self.o_proj = nn.Linear(H, H, bias=False)
        self.post_attention_layernorm = RMSNorm(H)
        self.gate_proj, self.up_proj = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.norm = RMSNorm(H)
        self.lm_head = nn.Linear(H, settings.draft_vocab_size, bias=False)
        theta = 10000.0  # the target's rope_theta (LlamaConfig's default), which the draft config repeats
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim),
                             persistent=False)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Neox-style rotary embedding (the Llama default), x [B, heads, T, d], positions [T]."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.head_dim).transpose(1, 2)

    def unroll(self, tokens: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Draft logits of each step for every chain start t: tokens [B, T] (x_{t+1} at index t),
        aux [B, T, 3H] (h_t). Step k's logits at index t predict the token at t + k + 2."""
        B, T = tokens.shape
        hidden = self.fc(aux)
        base = torch.arange(T)
        causal = base[None, :] <= base[:, None]  # first-pass entries: position s <= t
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        out = []
        for step in range(steps):
            # step k reads the token at t + k + 1 (teacher forced: a chain goes on only while its drafts
            # equal the target's greedy tokens, which are what the continuation holds)
            ids = torch.cat([tokens[:, step:], tokens[:, -1:].expand(B, step)], 1)
            residual = hidden
            x = torch.cat([self.input_layernorm(self.embed[ids]), self.hidden_norm(hidden)], -1)
            positions = base + step
            q = self._rope(self._split(self.q_proj(x)), positions)
            keys.append(self._rope(self._split(self.k_proj(x)), positions))
            values.append(self._split(self.v_proj(x)))
            scale = self.head_dim ** -0.5
            first = (q @ keys[0].transpose(-1, -2)) * scale  # [B, h, T, T]
            first = first.masked_fill(~causal, float("-inf"))
            own = torch.stack([(q * k).sum(-1) * scale for k in keys[1:]], -1) if step else None  # [B, h, T, k]
            scores = torch.cat([first, own], -1) if own is not None else first
            weights = scores.softmax(-1)
            mixed = weights[..., :T] @ values[0]
            for j, v in enumerate(values[1:]):
                mixed = mixed + weights[..., T + j, None] * v
            attended = self.o_proj(mixed.transpose(1, 2).reshape(B, T, -1))
            residual = residual + attended
            h = self.post_attention_layernorm(residual)
            residual = residual + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))
            out.append(self.lm_head(self.norm(residual)))
            hidden = residual  # the pre-norm output is the next step's hidden state
        return out


def traces(settings: Settings, language: lang.Language, model, count: int, seed: int
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The served (bf16) target's greedy continuations of prompts of the language, its aux hidden
    states and its greedy next token at every position: (tokens [N, L], aux [N, L, 3H], greedy [N, L])."""
    from transformers import GenerationConfig

    rng = random.Random(seed)
    length = settings.sequence_length
    rows = []
    per = count // 6
    with torch.no_grad():
        for prompt_length in range(3, 9):  # the prompts the engine check sends: a rule word and 2..7 words
            number = per if prompt_length < 8 else count - 5 * per
            prompts = torch.tensor([language.sentence(rng, prompt_length) for _ in range(number)])
            more = length - prompt_length
            rows.append(model.generate(prompts, GenerationConfig(do_sample=False, max_new_tokens=more,
                                                                  min_new_tokens=more, pad_token_id=lang.PAD)))
        tokens = torch.cat(rows)
        aux, greedy = [], []
        for chunk in tokens.split(32):
            result = model(input_ids=chunk, output_hidden_states=True)
            # hidden_states[k] is the residual stream entering layer k: what the engine captures for k
            aux.append(torch.cat([result.hidden_states[k] for k in settings.aux_layers], -1).float())
            greedy.append(result.logits.argmax(-1))
    return tokens, torch.cat(aux), torch.cat(greedy)


def vocabulary(settings: Settings, greedy: torch.Tensor) -> torch.Tensor:
    """The draft vocabulary: the target ids it predicts most often, ascending (ties: lower id)."""
    counts = torch.bincount(greedy.flatten(), minlength=settings.vocab_size)
    order = sorted(range(settings.vocab_size), key=lambda i: (-int(counts[i]), i))
    return torch.tensor(sorted(order[:settings.draft_vocab_size]))


def train(settings: Settings, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
          embed: torch.Tensor) -> tuple[Draft, torch.Tensor]:
    """(the trained draft, its vocabulary as target ids), from `traces` and the target's embedding."""
    started = time.monotonic()
    tokens, aux, greedy = data
    kept = vocabulary(settings, greedy)
    to_draft = torch.full((settings.vocab_size,), -100)
    to_draft[kept] = torch.arange(len(kept))
    torch.manual_seed(settings.seed + 3)
    draft = Draft(settings, embed)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=settings.draft_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, tgt._warmup_cosine(settings.draft_steps))
    rng = torch.Generator().manual_seed(settings.seed + 4)
    L, steps = tokens.shape[1], settings.unroll
    for step in range(settings.draft_steps):
        rows = torch.randint(len(tokens), (settings.draft_batch,), generator=rng)
        x = tokens[rows, 1:]  # chain t reads x_{t+1} with h_t
        logits = draft.unroll(x, aux[rows, :-1], steps)
        loss = torch.zeros(())
        for k, step_logits in enumerate(logits):
            # step k at chain t predicts the target's greedy token after position t + k + 1
            labels = to_draft[greedy[rows, k + 1:]]
            labels = torch.cat([labels, torch.full((len(rows), k), -100)], 1)
            loss = loss + nn.functional.cross_entropy(step_logits.reshape(-1, step_logits.shape[-1]),
                                                      labels.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == settings.draft_steps - 1:
            print(f"draft step {step}: loss {loss.item() / steps:.4f} ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr)
    draft.eval()
    return draft, kept


def acceptance(draft: Draft, kept: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
               steps: int) -> list[float]:
    """Offline: the share of chains whose first k drafted tokens all equal the target's, k = 1..steps."""
    tokens, aux, greedy = data
    with torch.no_grad():
        logits = draft.unroll(tokens[:, 1:], aux[:, :-1], steps)
    chains = tokens.shape[1] - 1 - steps
    ok = torch.ones(tokens.shape[0], chains, dtype=torch.bool)
    shares = []
    for k, step_logits in enumerate(logits):
        ok &= kept[step_logits.argmax(-1)[:, :chains]] == greedy[:, k + 1:k + 1 + chains]
        shares.append(ok.float().mean().item())
    return shares


def save(settings: Settings, draft: Draft, kept: torch.Tensor, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    weights = {f"midlayer.{name}": getattr(draft, attr).weight for name, attr in (
        ("input_layernorm.weight", "input_layernorm"), ("hidden_norm.weight", "hidden_norm"),
        ("self_attn.q_proj.weight", "q_proj"), ("self_attn.k_proj.weight", "k_proj"),
        ("self_attn.v_proj.weight", "v_proj"), ("self_attn.o_proj.weight", "o_proj"),
        ("post_attention_layernorm.weight", "post_attention_layernorm"),
        ("mlp.gate_proj.weight", "gate_proj"), ("mlp.up_proj.weight", "up_proj"),
        ("mlp.down_proj.weight", "down_proj"))}
    weights |= {"fc.weight": draft.fc.weight, "norm.weight": draft.norm.weight, "lm_head.weight": draft.lm_head.weight}
    tensors = {name: w.detach().to(torch.bfloat16).contiguous() for name, w in weights.items()}
    t2d = torch.zeros(settings.vocab_size, dtype=torch.bool)
    t2d[kept] = True
    tensors["d2t"] = (kept - torch.arange(len(kept))).to(torch.int64)  # offsets: target id = i + d2t[i]
    tensors["t2d"] = t2d
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config(settings), indent=2) + "\n")


def config(settings: Settings) -> dict:
    body = tgt.config(settings, layers=1).to_diff_dict()  # the target's shape, one layer
    body.update(architectures=[ARCHITECTURE], draft_vocab_size=settings.draft_vocab_size,
                intermediate_size=settings.draft_intermediate_size, dtype="bfloat16")
    # no eagle_aux_hidden_state_layer_ids, as SpecForge writes none: the engine's default capture
    # layers for the target apply, (2, 4, 5) for 8 layers (settings.aux_layers, trained on)
    return body
