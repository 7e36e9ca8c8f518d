"""The targets' numpy teacher is one file, shipped in both rehearsal trees: the vLLM tree's
`_rehearsal/teacher.py` is the SGLang tree's `srt/rehearsal_teacher.py` (a change to it changes both
stamps), it needs nothing but numpy, and both stand-ins' targets give the same true tokens."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from orchestrator.rehearsal import sglang as sglang_rehearsal, vllm as vllm_rehearsal

TEACHER = sglang_rehearsal.SIM_DIR / "sglang" / "srt" / "rehearsal_teacher.py"
CONFIG = dict(num_hidden_layers=12, vocab_size=1024, rms_norm_eps=1e-5, hidden_size=64, intermediate_size=128,
              rehearsal_draft_vocab_size=256, seed=20251030, rehearsal_surprise_per_mille=40)
CODE = """
import sys, json, types, numpy as np
sys.path.insert(0, sys.argv[1])
config = json.loads(sys.argv[3])
if sys.argv[2] == "sglang":
    from sglang.srt.models.rehearsal_target import oracle_of
    oracle = oracle_of(types.SimpleNamespace(**config))
    step = lambda ctx: oracle.next_token_ids([ctx])[0]
else:
    from vllm._rehearsal.target import Target
    step = Target(config).next_token
rng = np.random.default_rng(7)
print(json.dumps([step([int(x) for x in rng.integers(3, 1024, size=int(n))]) for n in rng.integers(1, 9, size=400)]))
"""


def tokens(tree: Path, kind: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", CODE, str(tree), kind, json.dumps(CONFIG)], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def test_one_teacher_file_in_both_trees(tmp_path):
    for release in vllm_rehearsal.releases():
        tree = vllm_rehearsal.assemble(release, tmp_path / release)
        assert (tree / "_rehearsal" / "teacher.py").read_bytes() == TEACHER.read_bytes()
        assert vllm_rehearsal.files(release)["_rehearsal/teacher.py"] == TEACHER  # part of the host's stamp
    assert not list(vllm_rehearsal.SIM_DIR.rglob("teacher.py"))  # no second copy in the vLLM sources
    assert sglang_rehearsal.files(sglang_rehearsal.DEFAULT_RELEASE)["srt/rehearsal_teacher.py"] == TEACHER


def test_the_teacher_needs_only_numpy():
    imported = set()
    for node in ast.walk(ast.parse(TEACHER.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(str(node.module).split(".")[0])
    assert imported == {"numpy", "__future__"}


def test_same_true_tokens_under_both_stand_ins(tmp_path):
    sglang = tokens(sglang_rehearsal.assemble(sglang_rehearsal.DEFAULT_RELEASE, tmp_path / "s").parent, "sglang")
    vllm = tokens(vllm_rehearsal.assemble(vllm_rehearsal.DEFAULT_RELEASE, tmp_path / "v").parent, "vllm")
    assert sglang == vllm and np.asarray(vllm).std() > 0
