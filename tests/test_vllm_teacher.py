"""The vLLM stand-in's numpy teacher is the SGLang stand-in's, bit for bit (until both import one
neutral module): the same seed gives the same draft tensors and the same true tokens."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parents[1] / "orchestrator" / "engines"
CODE = """
import sys, json, numpy as np
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "sglang":
    from sglang.srt.models.rehearsal_target import build_teacher, NextTokenOracle
    class C: pass
    c = C(); c.__dict__.update(num_hidden_layers=12, vocab_size=1024, rms_norm_eps=1e-5, hidden_size=64,
        intermediate_size=128, rehearsal_draft_vocab_size=256, seed=20251030, rehearsal_surprise_per_mille=40)
    oracle = NextTokenOracle(c)
    step = lambda ctx: oracle.next_token_ids([ctx])[0]
else:
    from vllm._rehearsal.teacher import build_teacher, Target
    target = Target(dict(num_hidden_layers=12, vocab_size=1024, hidden_size=64, intermediate_size=128,
        rehearsal_draft_vocab_size=256, seed=20251030))
    step = target.next_token
_, _, t = build_teacher(64, 128, 12, 1024, 256, [2, 6, 9], 20251030)
rng = np.random.default_rng(7)
tokens = [step([int(x) for x in rng.integers(3, 1024, size=int(n))]) for n in rng.integers(1, 9, size=400)]
print(json.dumps({"sum": {k: float(np.asarray(v, dtype=float).sum()) for k, v in t.items()}, "tokens": tokens}))
"""


def run(tree: Path, kind: str) -> str:
    return subprocess.run([sys.executable, "-c", CODE, str(tree), kind], check=True, capture_output=True, text=True).stdout


def test_same_teacher_and_true_tokens():
    sglang = run(ROOT / "sglang" / "sim", "sglang")
    vllm = run(ROOT / "vllm" / "sim", "vllm")
    assert sglang == vllm and np.asarray(json.loads(vllm)["tokens"]).std() > 0
