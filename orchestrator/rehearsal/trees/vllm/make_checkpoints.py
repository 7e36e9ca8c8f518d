"""Make the rehearsal checkpoints on a vLLM rehearsal host with orch's one checkpoint maker.

    python make_checkpoints.py OUTDIR

The maker (the SGLang rehearsal's `make_checkpoints.py`, copied into the tree by `assemble` as
`vllm/_rehearsal/shared_checkpoints.py`) imports its teacher as
`sglang.srt.models.rehearsal_target.build_teacher`; here that name is served by the vLLM tree's
copy of the shared numpy teacher (`vllm/_rehearsal/teacher.py`), so a host needs no SGLang tree and
both stand-ins load the same draft files.
"""

import runpy
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from vllm._rehearsal import teacher  # noqa: E402

for name in ("sglang", "sglang.srt", "sglang.srt.models"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["sglang.srt.models.rehearsal_target"] = teacher
runpy.run_path(str(HERE / "vllm" / "_rehearsal" / "shared_checkpoints.py"), run_name="__main__")
