"""The vLLM rehearsal host: the stand-in tree `sim/vllm/` orch copies to a host (never imported by
orch). A host gets one release: the base tree with `sim/releases/<release>/vllm/` laid over it."""

from __future__ import annotations

import shutil
from pathlib import Path

SIM_DIR = Path(__file__).parent / "sim"
# orch's one checkpoint maker, copied into every assembled tree (see sim/make_checkpoints.py)
SHARED_MAKER = Path(__file__).parents[1] / "sglang" / "sim" / "make_checkpoints.py"
SHARED_MAKER_AT = "_rehearsal/shared_checkpoints.py"
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
    found[SHARED_MAKER_AT] = SHARED_MAKER
    return found


def assemble(release: str, dest: Path) -> Path:
    """Write the release's `vllm/` tree under `dest` (which must not hold one yet)."""
    if release not in releases():
        raise ValueError(f"no vLLM rehearsal release {release!r}; there are {', '.join(releases())}")
    target = dest / "vllm"
    for layer in layers(release):
        shutil.copytree(layer, target, dirs_exist_ok=True, ignore=SKIP)
    shutil.copyfile(SHARED_MAKER, target / SHARED_MAKER_AT)
    return target
