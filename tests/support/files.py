"""Files on a test's host, hashed to compare before and after."""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.rehearsal import sglang as sim


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (bytecode caches aside, hidden temporary files included) with its hash."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
    }


def modes_snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Every file and folder under `folder` (bytecode caches aside): kind, mode, and a file's hash."""
    if not folder.exists():
        return {}
    found: dict[str, tuple[Any, ...]] = {}
    for p in sorted(folder.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        mode = p.lstat().st_mode
        found[str(p.relative_to(folder))] = (("file", mode, hashlib.sha256(p.read_bytes()).hexdigest())
                                             if p.is_file() else ("other", mode))
    return found


def sglang_tree(project: Path) -> Path:
    return project / "host" / "rehearsal" / "sglang"


def shipped(tmp_path: Path) -> dict[str, str]:
    """The rehearsal tree of the host's release (the default one) as orch assembles it."""
    return snapshot(sim.assemble(sim.DEFAULT_RELEASE, tmp_path / "shipped"))


@functools.lru_cache(maxsize=1)
def shipped_once() -> dict[str, str]:
    """The rehearsal tree of the hosts' release (the default one) as orch assembles it."""
    with tempfile.TemporaryDirectory() as folder:
        return snapshot(sim.assemble(sim.DEFAULT_RELEASE, Path(folder)))


def untouched(workdir: Path) -> bool:
    return snapshot(workdir / "rehearsal" / "sglang") == shipped_once()


def installed(project: Path) -> dict[str, str]:
    """The host's installed rehearsal SGLang, file by file."""
    return snapshot(project / "host" / "rehearsal" / "sglang")


def installed_in(workdir: Path) -> dict[str, str]:
    """The installed rehearsal SGLang of the host whose workdir is `workdir`, file by file."""
    return snapshot(workdir / "rehearsal" / "sglang")


def modified_files(project: Path, original: dict[str, str]) -> list[str]:
    """Files of the installed rehearsal SGLang that differ from `original` (or are extra).
    `original` is hashed on the host after install, not taken from the repo, which other work may
    be changing while the tests run."""
    now = installed(project)
    return sorted(k for k in now.keys() | original.keys() if now.get(k) != original.get(k))


def journal_files(project: Path) -> list[str]:
    journal = project / "host" / "journal"
    return sorted(str(p.relative_to(journal)) for p in journal.rglob("*")) if journal.exists() else []
