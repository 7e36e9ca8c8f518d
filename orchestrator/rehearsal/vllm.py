"""The vLLM rehearsal host: the stand-in tree `trees/vllm/vllm/` orch copies to a host (never
imported by orch). A host gets one release: the base tree with `trees/vllm/releases/<release>/vllm/`
laid over it, plus the two files both rehearsals share, kept once in the SGLang tree: orch's
checkpoint maker and the targets' numpy teacher."""

from __future__ import annotations

from pathlib import Path

from .sglang import SIM_DIR as SGLANG_SIM
from .standin import StandIn

SIM_DIR = Path(__file__).parent / "trees" / "vllm"
SHARED = {  # path in the assembled tree -> the one copy, copied into every assembled tree
    "_rehearsal/shared_checkpoints.py": SGLANG_SIM / "make_checkpoints.py",  # see trees/vllm/make_checkpoints.py
    "_rehearsal/teacher.py": SGLANG_SIM / "sglang" / "srt" / "rehearsal_teacher.py",  # the true next tokens
}
CHECKPOINT_MAKER = SIM_DIR / "make_checkpoints.py"
DEFAULT_RELEASE = "0.33.0"  # Kimi-K2.5 serves EAGLE-3 drafts from here on
STAND_IN = StandIn(SIM_DIR, "vllm", DEFAULT_RELEASE, CHECKPOINT_MAKER, SHARED)
releases, layers, files, assemble = STAND_IN.releases, STAND_IN.layers, STAND_IN.files, STAND_IN.assemble
