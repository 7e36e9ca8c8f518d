"""Write the rehearsal checkpoints: two target configs and three EAGLE-3 drafts.

    python make_checkpoints.py OUTDIR

Standalone (Python >= 3.11 stdlib + numpy). Idempotent: a complete OUTDIR with the same format
stamp is left alone; every file is written to a temporary name and renamed into place.

The targets carry no weights: the rehearsal SGLang builds them from the `seed` in config.json.
The drafts hold the "teacher" draft weights derived from that same seed plus a little noise, so
a healthy draft predicts the target's next tokens well but not perfectly. The teacher comes from
`sglang/srt/models/rehearsal_target.py` of the rehearsal tree that sits beside this file, so the
server and the checkpoints can never disagree about it.

Layout written:
    kimi-k25-target/config.json          KimiK25ForConditionalGeneration around a DeepSeek-V3 text model
                                         (its aux capture depends on the release)
    kimi-vl-target/config.json           KimiVLForConditionalGeneration (no aux capture in any release)
    llama-target/config.json             LlamaForCausalLM (aux capture)
    eagle3-draft/                        healthy draft: midlayer.* keys, offset d2t
    eagle3-draft-layers0/                same tensors with midlayer.* renamed layers.0.*
    eagle3-draft-absolute-d2t/           same tensors with d2t holding absolute target ids
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

# The rehearsal's own sglang tree sits beside this file (in the repo and on every host).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang.srt.models.rehearsal_target import build_teacher  # noqa: E402

FORMAT = 2  # 2: Kimi targets keep the text model's settings under text_config
SEED = 20251030
HIDDEN = 64
INTERMEDIATE = 128
HEADS = 4
TARGET_LAYERS = 12
VOCAB = 1024
DRAFT_VOCAB = 256
EPS = 1e-5
NOISE = 0.06  # relative noise on the learned draft blocks
STAMP = ".rehearsal-checkpoints.json"
DTYPES = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}


def noisy_draft(tensors: dict, seed: int) -> dict:
    """The "trained" draft: the teacher with noise on its learned blocks, stored as float16.

    The identity blocks (token bookkeeping) stay exact; only the mixing, MLP and head
    weights are perturbed, which makes about one draft token in seven disagree.
    """
    rng = np.random.default_rng(seed + 1)
    out = {}
    for name, value in tensors.items():
        value = value.copy()
        if name.endswith(("gate_proj.weight", "up_proj.weight", "down_proj.weight", "lm_head.weight")):
            learned = value != 0
            value[learned] += rng.standard_normal(int(learned.sum())) * NOISE * value[learned].std()
        elif name.endswith("v_proj.weight"):
            half = value.shape[0] // 2
            for block in (np.s_[half:, :half], np.s_[half:, 2 * half : 3 * half]):
                value[block] += rng.standard_normal(value[block].shape) * NOISE * value[block].std()
        out[name] = value.astype(np.float16) if value.dtype.kind == "f" else value
    return out


def safetensors_bytes(tensors: dict) -> bytes:
    header, chunks, offset = {}, [], 0
    for name, value in tensors.items():
        data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[value.dtype], "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(chunks)


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, (json.dumps(obj, indent=2) + "\n").encode())


def target_config(arch: str, model_type: str) -> dict:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 131072,
        "rms_norm_eps": EPS,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "seed": SEED,
        "rehearsal_draft_vocab_size": DRAFT_VOCAB,
        "rehearsal_surprise_per_mille": 40,
    }


def multimodal_config(arch: str, model_type: str, text_model_type: str) -> dict:
    """A vision-language target as Kimi publishes it: the text model's settings under `text_config`."""
    text = target_config(arch, text_model_type)
    del text["architectures"]  # the outer model's
    return {
        "architectures": [arch],
        "model_type": model_type,
        "text_config": text,
        "vision_config": {"model_type": "moonvit", "hidden_size": HIDDEN, "patch_size": 14},
        "media_placeholder_token_id": VOCAB - 1,
        "tie_word_embeddings": False,
    }


def draft_config(aux_layer_ids: list[int]) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": EPS,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_layer_ids, "use_aux_hidden_state": True},
    }


def make(outdir: Path) -> bool:
    """Write everything unless already complete; True if something was written."""
    stamp = {"format": FORMAT, "seed": SEED, "hidden_size": HIDDEN, "vocab_size": VOCAB}
    stamp_path = outdir / STAMP
    if stamp_path.exists():
        try:
            if json.loads(stamp_path.read_text()) == stamp:
                return False
        except ValueError:
            pass
    # SpecForge's default aux layers; SGLang adds 1 to each when it sets up the capture
    aux_layer_ids = [1, TARGET_LAYERS // 2 - 1, TARGET_LAYERS - 4]
    capture = [i + 1 for i in aux_layer_ids]
    _, _, teacher = build_teacher(HIDDEN, INTERMEDIATE, TARGET_LAYERS, VOCAB, DRAFT_VOCAB, capture, SEED)
    draft = noisy_draft(teacher, SEED)
    write_json(outdir / "kimi-k25-target" / "config.json",
               multimodal_config("KimiK25ForConditionalGeneration", "kimi_k25", "deepseek_v3"))
    write_json(outdir / "kimi-vl-target" / "config.json",
               multimodal_config("KimiVLForConditionalGeneration", "kimi_vl", "deepseek_v2"))
    write_json(outdir / "llama-target" / "config.json", target_config("LlamaForCausalLM", "llama"))
    variants = {
        "eagle3-draft": draft,
        "eagle3-draft-layers0": {k.replace("midlayer.", "layers.0.", 1): v for k, v in draft.items()},
        "eagle3-draft-absolute-d2t": {**draft, "d2t": draft["d2t"] + np.arange(DRAFT_VOCAB)},
    }
    for name, tensors in variants.items():
        write_json(outdir / name / "config.json", draft_config(aux_layer_ids))
        write_atomic(outdir / name / "model.safetensors", safetensors_bytes(tensors))
    write_json(stamp_path, stamp)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_checkpoints.py OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    wrote = make(outdir)
    print(f"rehearsal checkpoints {'written to' if wrote else 'already complete in'} {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
