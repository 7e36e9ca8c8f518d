"""The rehearsal SGLang: a CPU stand-in for SGLang under `trees/sglang/` that orch copies to hosts
(never imported by orch). A host gets one named release: the base tree `sglang/` with
`releases/<release>/sglang/` laid over it, so the installed files are that release's own shapes."""

from __future__ import annotations

from pathlib import Path

from .standin import StandIn

SIM_DIR = Path(__file__).parent / "trees" / "sglang"
DEFAULT_RELEASE = "0.5.9"  # the story's time
STAND_IN = StandIn(SIM_DIR, "sglang", DEFAULT_RELEASE, SIM_DIR / "make_checkpoints.py")
releases, layers, files, assemble = STAND_IN.releases, STAND_IN.layers, STAND_IN.files, STAND_IN.assemble
