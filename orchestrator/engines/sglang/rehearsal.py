"""The rehearsal SGLang: a CPU stand-in for SGLang under `sim/` that orch copies to hosts (never imported by orch).

A host gets one named release: the base tree `sglang/` with `releases/<release>/sglang/` laid over
it (files there replace or add to the base), so the installed files are that release's own shapes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SIM_DIR = Path(__file__).parent / "sim"
RELEASES_DIR = SIM_DIR / "releases"
DEFAULT_RELEASE = "0.5.9"  # the story's time
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def releases() -> tuple[str, ...]:
    """The emulated releases, oldest first."""
    names = [p.name for p in RELEASES_DIR.iterdir() if (p / "sglang").is_dir()]
    return tuple(sorted(names, key=lambda name: tuple(int(part) for part in name.split("."))))


def layers(release: str) -> tuple[Path, Path]:
    """The base tree and the release's overlay, in the order they are laid down."""
    return SIM_DIR / "sglang", RELEASES_DIR / release / "sglang"


def files(release: str) -> dict[str, Path]:
    """Every file of the assembled tree (path relative to `sglang/`) and where it comes from."""
    found: dict[str, Path] = {}
    for layer in layers(release):
        for path in sorted(layer.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found[str(path.relative_to(layer))] = path
    return found


def assemble(release: str, dest: Path) -> Path:
    """Write the release's `sglang/` tree under `dest` (which must not hold one yet)."""
    target = dest / "sglang"
    for layer in layers(release):
        shutil.copytree(layer, target, dirs_exist_ok=True, ignore=SKIP)
    return target
