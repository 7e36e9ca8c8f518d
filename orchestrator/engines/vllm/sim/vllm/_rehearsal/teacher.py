"""The rehearsal target's next-token function, in numpy alone.

The same function as the SGLang rehearsal's `srt/models/rehearsal_target.py` (`build_teacher`,
`NextTokenOracle`), bit for bit, so that one draft checkpoint written by orch's
`make_checkpoints.py` meets the same "true" tokens under both stand-ins; a test of orch compares the
two. A target is not a language model: every target token embedding lives in the first half of the
hidden state, each decoder layer is an orthogonal mixing (`rotations`), and the true next token is
what the exact "teacher" draft predicts, overridden now and then by a context hash.
"""

from __future__ import annotations

import numpy as np

FIRST_WORD_ID = 3  # 0 <unk>, 1 <s>, 2 </s>
_MASK = (1 << 64) - 1


def build_teacher(hidden, intermediate, target_layers, vocab, draft_vocab, capture, seed):
    """(embed [vocab, hidden], rotations [layers x (hidden, hidden)], draft tensors by checkpoint key)."""
    rng = np.random.default_rng(seed)
    half = hidden // 2
    scale = 0.02
    words = rng.standard_normal((vocab, half))
    words /= np.sqrt((words**2).mean(axis=1, keepdims=True))
    embed = np.zeros((vocab, hidden))
    embed[:, :half] = words
    rotations = [np.linalg.qr(rng.standard_normal((hidden, hidden)))[0] for _ in range(target_layers)]
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
    v_proj[:half, :half] = eye
    v_proj[:half, hidden : hidden + half] = -eye
    v_proj[half:, :half] = scale * mix_cur
    v_proj[half:, hidden : hidden + half] = scale * mix_prev
    v_proj[half:, hidden + half :] = -np.eye(hidden - half)
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


def rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * weight


def mix(*values: int) -> int:
    """A 64-bit integer hash (splitmix64 steps), stable across runs and Python versions."""
    x = 0x9E3779B97F4A7C15
    for value in values:
        x = (x ^ (int(value) + 0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


def draft_layer(w: dict, embeds: np.ndarray, hidden: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """One EAGLE-3 decoder layer on one position (attention over a single key is its value):
    (logits over the draft vocabulary, the pre-norm hidden state fed to the next draft step)."""
    x = np.concatenate([rms(embeds, w["layers.0.input_layernorm.weight"], eps),
                        rms(hidden, w["layers.0.hidden_norm.weight"], eps)], axis=-1)
    h1 = x @ w["layers.0.self_attn.v_proj.weight"].T @ w["layers.0.self_attn.o_proj.weight"].T + hidden
    m = rms(h1, w["layers.0.post_attention_layernorm.weight"], eps)
    gate, up = m @ w["layers.0.mlp.gate_proj.weight"].T, m @ w["layers.0.mlp.up_proj.weight"].T
    out = (gate * 0.5 * (1 + np.tanh(0.5 * gate)) * up) @ w["layers.0.mlp.down_proj.weight"].T + h1
    return rms(out, w["norm.weight"], eps) @ w["lm_head.weight"].T, out


class Target:
    """The target model: aux hidden states for the draft and the true next tokens."""

    def __init__(self, text_config: dict):
        n = int(text_config["num_hidden_layers"])
        self.vocab_size = int(text_config["vocab_size"])
        self.eps = float(text_config.get("rms_norm_eps", 1e-5))
        self.surprise = int(text_config.get("rehearsal_surprise_per_mille", 40))
        self.embed, self.rotations, teacher = build_teacher(
            int(text_config["hidden_size"]), int(text_config["intermediate_size"]), n, self.vocab_size,
            int(text_config["rehearsal_draft_vocab_size"]), [2, n // 2, n - 3], int(text_config["seed"]))
        self.teacher = {k.replace("midlayer.", "layers.0."): v for k, v in teacher.items()}
        self.hot = teacher["d2t"] + np.arange(len(teacher["d2t"]))
        self.num_layers = n

    def aux_hidden_states(self, token: int, layers: tuple[int, ...]) -> np.ndarray:
        """The inputs of the given decoder layers for one token, concatenated (vLLM's llama.py
        captures `hidden_states + residual` before layer idx runs)."""
        state, captured = self.embed[token], []
        for idx, rotation in enumerate(self.rotations):
            if idx in layers:
                captured.append(state)
            state = state @ rotation
        return np.concatenate(captured)

    def last_hidden_state(self, token: int) -> np.ndarray:
        """The last decoder layer's output for one token: what the draft reads without aux capture."""
        state = self.embed[token]
        for rotation in self.rotations:
            state = state @ rotation
        return state

    def next_token(self, context: list[int]) -> int:
        prev = context[-2] if len(context) > 1 else 0
        carried = self.embed[prev]
        logits, _ = draft_layer(self.teacher, self.embed[context[-1]], carried, self.eps)
        token = int(self.hot[int(np.argmax(logits))])
        h = mix(len(context), *context[-3:])
        if h % 1000 < self.surprise:
            token = FIRST_WORD_ID + (h >> 10) % (self.vocab_size - FIRST_WORD_ID)
        return token
