"""The vLLM rehearsal host: the stand-in tree `sim/vllm/` orch copies to a host (never imported by
orch). A host gets one release: the base tree with `sim/releases/<release>/vllm/` laid over it, plus
the two files both rehearsals share, kept once in the SGLang tree: orch's checkpoint maker and the
targets' numpy teacher."""

from __future__ import annotations

import shutil
from pathlib import Path

SIM_DIR = Path(__file__).parent / "sim"
SGLANG_SIM = Path(__file__).parents[1] / "sglang" / "sim"
SHARED = {  # path in the assembled tree -> the one copy, copied into every assembled tree
    "_rehearsal/shared_checkpoints.py": SGLANG_SIM / "make_checkpoints.py",  # see sim/make_checkpoints.py
    "_rehearsal/teacher.py": SGLANG_SIM / "sglang" / "srt" / "rehearsal_teacher.py",  # the true next tokens
}
CHECKPOINT_MAKER = SIM_DIR / "make_checkpoints.py"
RELEASES_DIR = SIM_DIR / "releases"
DEFAULT_RELEASE = "0.33.0"  # Kimi-K2.5 serves EAGLE-3 drafts from here on
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def releases() -> tuple[str, ...]:
    """The emulated releases, oldest first."""
    names = [p.name for p in RELEASES_DIR.iterdir() if (p / "vllm").is_dir()]
    return tuple(sorted(names, key=lambda name: tuple(int(part) for part in name.split("."))))


def layers(release: str) -> tuple[Path, Path]:
    return SIM_DIR / "vllm", RELEASES_DIR / release / "vllm"


def files(release: str) -> dict[str, Path]:
    """Every file of the assembled tree (path relative to `vllm/`) and where it comes from."""
    found: dict[str, Path] = {}
    for layer in layers(release):
        for path in sorted(layer.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found[str(path.relative_to(layer))] = path
    return {**found, **SHARED}


def assemble(release: str, dest: Path) -> Path:
    """Write the release's `vllm/` tree under `dest` (which must not hold one yet)."""
    if release not in releases():
        raise ValueError(f"no vLLM rehearsal release {release!r}; there are {', '.join(releases())}")
    target = dest / "vllm"
    for layer in layers(release):
        shutil.copytree(layer, target, dirs_exist_ok=True, ignore=SKIP)
    for at, source in SHARED.items():
        shutil.copyfile(source, target / at)
    return target
