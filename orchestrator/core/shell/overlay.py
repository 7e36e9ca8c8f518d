"""Overlays: a run's own patched copy of a package (`host/overlay.py`), a tree of symlinks to the
installed files in which only the patched files are files of their own."""

from __future__ import annotations

from .files import mkdir, remove_files
from .python import remove_pycache
from .quoting import path

OVERLAY_PAUSES = (0.3, 1)  # seconds before each walk of the tree after a failed one


def overlay_packages(site: str, packages: dict[str, str]) -> str:
    """Under `site`, one tree per package (`site/<name>`) of real folders whose files are symlinks
    to the installed ones (GNU `cp -rs`): the installed files are only read.

    A file that vanishes while cp walks the tree (another run's patch written beside its target
    and renamed onto it, a server's bytecode written the same way) fails the walk: the tree is
    walked again after a pause, and only the last walk's error is shown."""
    steps = [mkdir(site)]
    for name, folder in packages.items():
        walk = f"rm -rf -- {path(f'{site}/{name}')} && cp -rs -- {path(folder)} {path(f'{site}/{name}')}"
        tries = [f"{{ {walk} 2>/dev/null; }}", *(f"{{ sleep {p}; {walk} 2>/dev/null; }}" for p in OVERLAY_PAUSES[:-1])]
        steps.append("{ " + " || ".join([*tries, f"{{ sleep {OVERLAY_PAUSES[-1]}; {walk}; }}"]) + "; }")
    return " && ".join(steps)


def unlink_for_copy(*files: str) -> str:
    """Drop the symlinks of files about to get their own text in an overlay, with their cached
    bytecode (a symlink to the installed file's), so Python compiles the new text."""
    return "; ".join([remove_files(*files), *(remove_pycache(f) for f in files)])
