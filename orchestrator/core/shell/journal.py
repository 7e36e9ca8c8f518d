"""The host's journal (`host/journal.py`): its records read back, the original a patch replaces
kept beside it, and what a killed writer leaves swept away and made durable."""

from __future__ import annotations

from pathlib import PurePosixPath

from .quoting import path, quote


def cat_records(folder: str, pattern: str = "*/*.json") -> str:
    """Print every one-line JSON record under `folder` (nothing when there are none)."""
    return f"cat -- {path(folder)}/{pattern} 2>/dev/null; true"


def keep_original(file: str, restore: str) -> str:
    """Keep the file's current bytes at `restore` (beside it, so on its disk) before it is replaced:
    a hard link (no new space: the replaced inode lives on in it), else a copy keeping mode and owner."""
    return f"ln -f -- {path(file)} {path(restore)} 2>/dev/null || cp -p -- {path(file)} {path(restore)}"


def sync_paths(*paths: str) -> str:
    """fsync files and folders (a folder's fsync makes the renames inside it durable); a `sync`
    without file arguments (old coreutils, busybox) falls back to syncing everything."""
    return f"sync -- {' '.join(path(p) for p in paths)} 2>/dev/null || sync"


def remove_stale_temps(source: str) -> str:
    """Remove temporary files a killed writer left beside `source` (`.<name>.*.orch-tmp`)."""
    p = PurePosixPath(source)
    return f"rm -f -- {path(str(p.parent))}/{quote('.' + p.name + '.')}*.orch-tmp"


def sweep_journal(root: str) -> str:
    """Remove what a killed controller can leave in the journal besides records: a saved original
    whose record was never written, temporary files, and empty run folders."""
    r = path(root)
    return (
        f"for o in {r}/*/*.orig; do [ -e \"$o\" ] || continue; [ -e \"${{o%.orig}}.json\" ] || rm -f -- \"$o\"; done; "
        f"rm -f -- {r}/*/.*.orch-tmp; rmdir -- {r}/*/ 2>/dev/null; true"
    )
