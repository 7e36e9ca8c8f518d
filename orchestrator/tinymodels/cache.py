"""Models cached by content: the key is the sha256 of this package's own source and of the settings,
so a change to either makes new models and an unchanged checkout reuses the old ones. A folder is
built beside its final place and renamed there whole: a reader sees a complete folder or none."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .settings import Settings

PACKAGE = Path(__file__).resolve().parent
DONE = "models.json"  # written last: its presence is what "complete" means


def key(settings: Settings) -> str:
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps(settings.as_dict(), sort_keys=True).encode())
    return digest.hexdigest()


def complete(folder: Path) -> bool:
    return (folder / DONE).is_file()


def build(out: Path, settings: Settings, make: Callable[[Path], dict[str, str]]) -> Path:
    """DIR/<key>/ made by `make(folder)` (which returns the names of what it made, relative to the
    folder), or reused when complete."""
    final = out / key(settings)
    if complete(final):
        return final
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name[:16]}-making-", dir=out))
    try:
        made = make(work)
        (work / DONE).write_text(json.dumps({"settings": settings.as_dict(), "made": made}, indent=2) + "\n")
        if final.exists() and not complete(final):
            shutil.rmtree(final)  # a folder not made by this code (a rename is whole): make it again
        try:
            os.rename(work, final)
        except OSError:
            if not complete(final):
                raise
            shutil.rmtree(work)  # another maker finished first: the same content by construction
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final


def link(path: Path, folder: Path) -> None:
    """Point the symlink `path` at `folder`, replaced atomically (a symlink made beside it, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_symlink():
        raise SystemExit(f"{path} exists and is not a symlink; remove it or give another --link")
    beside = path.with_name(f".{path.name}.{os.getpid()}")
    beside.unlink(missing_ok=True)
    beside.symlink_to(folder)
    os.replace(beside, path)
