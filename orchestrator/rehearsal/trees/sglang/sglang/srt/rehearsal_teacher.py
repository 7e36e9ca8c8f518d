"""The rehearsal targets' "true" next-token function and the exact draft it is built from, in
numpy alone and naming no engine: the one copy both rehearsal stand-ins run. It lives in the
SGLang tree beside orch's one checkpoint maker (`make_checkpoints.py`, which writes the drafts from
`build_teacher`); the vLLM rehearsal copies it into its tree as `vllm/_rehearsal/teacher.py` when it
assembles one, so a draft checkpoint meets the same true tokens under both engines.

A target is not a language model: it is a deterministic function from a context to the "true"
next token, built so that an EAGLE-3 draft *can* learn it. Every target token embedding lives in
the first half of the hidden state; each decoder layer is an orthogonal mixing (`rotations`), so
the three captured layers together still hold the token exactly while the last layer alone holds
it only through a rotation the draft was never trained on. The true next token is what the exact
"teacher" draft predicts from the previous and current tokens, overridden now and then
(`surprise` per mille) by a context hash, so even a perfect draft is not always right.
"""

from __future__ import annotations

import numpy as np

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
    """One EAGLE-3 decoder layer on one position, or on a batch of them as rows (attention over a
    single key is its value):
    (logits over the draft vocabulary, the pre-norm hidden state fed to the next draft step)."""
    x = np.concatenate([rms(embeds, w["layers.0.input_layernorm.weight"], eps),
                        rms(hidden, w["layers.0.hidden_norm.weight"], eps)], axis=-1)
    h1 = x @ w["layers.0.self_attn.v_proj.weight"].T @ w["layers.0.self_attn.o_proj.weight"].T + hidden
    m = rms(h1, w["layers.0.post_attention_layernorm.weight"], eps)
    gate, up = m @ w["layers.0.mlp.gate_proj.weight"].T, m @ w["layers.0.mlp.up_proj.weight"].T
    out = (gate * 0.5 * (1 + np.tanh(0.5 * gate)) * up) @ w["layers.0.mlp.down_proj.weight"].T + h1
    return rms(out, w["norm.weight"], eps) @ w["lm_head.weight"].T, out


class Oracle:
    """A target's next-token function, deterministic in the context; `embed`, `rotations` and the
    teacher's tensors (`layers.0.*` names) are the target's stand-in weights."""

    def __init__(self, hidden: int, intermediate: int, layers: int, vocab: int, draft_vocab: int, seed: int,
                 eps: float = 1e-5, surprise: int = 40):
        self.vocab_size, self.eps, self.surprise = vocab, eps, surprise
        self.embed, self.rotations, teacher = build_teacher(hidden, intermediate, layers, vocab, draft_vocab,
                                                            capture_layers(layers), seed)
        self.teacher = {k.replace("midlayer.", "layers.0."): v for k, v in teacher.items()}
        self.hot = teacher["d2t"] + np.arange(len(teacher["d2t"]))

    def next_token_ids(self, contexts: list[list[int]]) -> list[int]:
        """The true next token of each context (one batched teacher step)."""
        if not contexts:
            return []
        prev = np.array([ctx[-2] if len(ctx) > 1 else 0 for ctx in contexts])
        cur = np.array([ctx[-1] for ctx in contexts])
        logits, _ = draft_layer(self.teacher, self.embed[cur], self.embed[prev], self.eps)
        ids = self.hot[logits.argmax(axis=-1)].tolist()
        for i, ctx in enumerate(contexts):
            h = mix(len(ctx), *ctx[-3:])
            if h % 1000 < self.surprise:
                ids[i] = FIRST_WORD_ID + (h >> 10) % (self.vocab_size - FIRST_WORD_ID)
        return ids


def capture_layers(layers: int) -> list[int]:
    """The aux layers the teacher's fc reads (an early, a middle and a late one, as EAGLE-3 picks)."""
    return [2, layers // 2, layers - 3]
