"""The rehearsal targets' stand-in weights and their next-token function.

A target here is not a language model: it is a deterministic function from a context to the
"true" next token, built so that an EAGLE-3 draft *can* learn it. Every target token embedding
lives in the first half of the hidden state; each decoder layer is an orthogonal mixing, so the
three captured layers together still hold the token exactly while the last layer alone holds
it only through a rotation the draft was never trained on. The true next token is what the
exact "teacher" draft predicts from the previous and current tokens, overridden now and then
(`rehearsal_surprise_per_mille`) by a context hash, so even a perfect draft is not always right.

`build_teacher` is also what make_checkpoints.py writes the drafts from (the teacher plus noise,
from the same seed).
"""

from __future__ import annotations

import numpy as np

from sglang.srt import _torch as torch
from sglang.srt._torch import nn
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

FIRST_WORD_ID = 3  # 0 <unk>, 1 <s>, 2 </s>
_MASK = (1 << 64) - 1


def build_teacher(hidden, intermediate, target_layers, vocab, draft_vocab, capture, seed):
    """The exact draft the target's next-token function is built from (float64, checkpoint names).

    Returns (embed [vocab, hidden], rotations [layers x (hidden, hidden)], tensors by checkpoint key).
    """
    rng = np.random.default_rng(seed)
    half = hidden // 2
    scale = 0.02  # how small the "logit" half of a hidden state is next to the token half
    words = rng.standard_normal((vocab, half))
    words /= np.sqrt((words**2).mean(axis=1, keepdims=True))
    embed = np.zeros((vocab, hidden))
    embed[:, :half] = words
    rotations = [np.linalg.qr(rng.standard_normal((hidden, hidden)))[0] for _ in range(target_layers)]
    # the draft vocabulary sits low in the vocabulary, like the frequent tokens SpecForge keeps
    hot = np.sort(rng.choice(np.arange(FIRST_WORD_ID, vocab - draft_vocab), size=draft_vocab, replace=False))
    mix_cur = rng.standard_normal((half, half)) / np.sqrt(half) * 0.6
    mix_prev = rng.standard_normal((half, half)) / np.sqrt(half) * 1.4
    gate = rng.standard_normal((intermediate, hidden)) / np.sqrt(hidden)
    up = rng.standard_normal((intermediate, hidden)) / np.sqrt(hidden)
    down = rng.standard_normal((half, intermediate)) / np.sqrt(intermediate)
    head = rng.standard_normal((draft_vocab, half))
    head /= np.linalg.norm(head, axis=1, keepdims=True)
    q_proj = rng.standard_normal((hidden, 2 * hidden)) * 0.02
    k_proj = rng.standard_normal((hidden, 2 * hidden)) * 0.02

    eye = np.eye(half)
    v_proj = np.zeros((hidden, 2 * hidden))
    v_proj[:half, :half] = eye  # token half: current token ...
    v_proj[:half, hidden : hidden + half] = -eye  # ... replaces the previous one carried in
    v_proj[half:, :half] = scale * mix_cur
    v_proj[half:, hidden : hidden + half] = scale * mix_prev
    v_proj[half:, hidden + half :] = -np.eye(hidden - half)  # drop the previous step's logit half
    down_proj = np.zeros((hidden, intermediate))
    down_proj[half:] = scale * down
    lm_head = np.zeros((draft_vocab, hidden))
    lm_head[:, half:] = head
    cumulative = [np.eye(hidden)]
    for rotation in rotations:
        cumulative.append(cumulative[-1] @ rotation)
    fc = np.hstack([cumulative[i] for i in capture]) / len(capture)
    post_norm = np.concatenate([np.full(half, 1 / np.sqrt(2)), np.full(hidden - half, 1 / (scale * np.sqrt(2)))])
    d2t = hot - np.arange(draft_vocab)
    t2d = np.zeros(vocab, dtype=bool)
    t2d[hot] = True
    tensors = {
        "midlayer.input_layernorm.weight": np.full(hidden, 1 / np.sqrt(2)),
        "midlayer.hidden_norm.weight": np.full(hidden, 1 / np.sqrt(2)),
        "midlayer.self_attn.q_proj.weight": q_proj,
        "midlayer.self_attn.k_proj.weight": k_proj,
        "midlayer.self_attn.v_proj.weight": v_proj,
        "midlayer.self_attn.o_proj.weight": np.eye(hidden),
        "midlayer.post_attention_layernorm.weight": post_norm,
        "midlayer.mlp.gate_proj.weight": gate,
        "midlayer.mlp.up_proj.weight": up,
        "midlayer.mlp.down_proj.weight": down_proj,
        "fc.weight": fc,
        "norm.weight": np.ones(hidden),
        "lm_head.weight": lm_head,
        "d2t": d2t.astype(np.int64),
        "t2d": t2d,
    }
    return embed, rotations, tensors


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * weight


def _mix(*values: int) -> int:
    """A 64-bit integer hash (splitmix64 steps), stable across runs and Python versions."""
    x = 0x9E3779B97F4A7C15
    for value in values:
        x = (x ^ (int(value) + 0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


class NextTokenOracle:
    """The target's next-token function: deterministic in the context."""

    def __init__(self, config):
        n = config.num_hidden_layers
        self.vocab_size = config.vocab_size
        self.eps = getattr(config, "rms_norm_eps", 1e-5)
        self.surprise = getattr(config, "rehearsal_surprise_per_mille", 40)
        self.embed, self.rotations, w = build_teacher(
            config.hidden_size,
            config.intermediate_size,
            n,
            config.vocab_size,
            config.rehearsal_draft_vocab_size,
            [2, n // 2, n - 3],
            config.seed,
        )
        self.w = w
        self.hot = w["d2t"] + np.arange(len(w["d2t"]))

    def next_token_ids(self, contexts: list[list[int]]) -> list[int]:
        if not contexts:
            return []
        w, eps = self.w, self.eps
        prev = np.array([ctx[-2] if len(ctx) > 1 else 0 for ctx in contexts])
        cur = np.array([ctx[-1] for ctx in contexts])
        carried = self.embed[prev]
        x = np.concatenate(
            [_rms(self.embed[cur], w["midlayer.input_layernorm.weight"], eps), _rms(carried, w["midlayer.hidden_norm.weight"], eps)],
            axis=-1,
        )
        h1 = x @ w["midlayer.self_attn.v_proj.weight"].T @ w["midlayer.self_attn.o_proj.weight"].T + carried
        m = _rms(h1, w["midlayer.post_attention_layernorm.weight"], eps)
        gate, up = m @ w["midlayer.mlp.gate_proj.weight"].T, m @ w["midlayer.mlp.up_proj.weight"].T
        out = (gate * 0.5 * (1 + np.tanh(0.5 * gate)) * up) @ w["midlayer.mlp.down_proj.weight"].T + h1
        logits = _rms(out, w["norm.weight"], eps) @ w["lm_head.weight"].T
        ids = self.hot[logits.argmax(axis=-1)].tolist()
        for i, ctx in enumerate(contexts):
            h = _mix(len(ctx), *ctx[-3:])
            if h % 1000 < self.surprise:
                ids[i] = FIRST_WORD_ID + (h >> 10) % (self.vocab_size - FIRST_WORD_ID)
        return ids


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
        self.oracle = NextTokenOracle(self.config)
        self.model.embed_tokens.weight.data[...] = self.oracle.embed
        for layer, rotation in zip(self.model.layers, self.oracle.rotations):
            layer.weight.data[...] = rotation
        # the full-vocabulary head: the teacher's rows at the draft vocabulary's ids, zero elsewhere
        self.lm_head.weight.data[...] = 0
        self.lm_head.weight.data[self.oracle.hot] = self.oracle.w["lm_head.weight"]

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
