"""Files and folders on a host: make, move, remove, read, write, list and hash them."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from .quoting import path, quote

NO_FILE = 44  # `read_file`'s status for a missing file


# -- folders and renames ------------------------------------------------------------------------


def mkdir(*paths: str) -> str:
    return "mkdir -p -- " + " ".join(path(p) for p in paths)


def mkdir_private(folder: str) -> str:
    """A folder only its owner can enter (a run folder holds the launch's secrets file for a moment)."""
    return f"mkdir -p -- {path(folder)} && chmod 700 -- {path(folder)}"


def remove_tree(p: str) -> str:
    return f"rm -rf -- {path(p)}"


def remove_files(*paths: str) -> str:
    return "rm -f -- " + " ".join(path(p) for p in paths)


def remove_empty_dir(p: str) -> str:
    return f"rmdir -- {path(p)} 2>/dev/null; true"


def move(source: str, target: str) -> str:
    """Rename over `target` (atomic within one filesystem)."""
    return f"mv -f -- {path(source)} {path(target)}"


def rename_over(source: str, target: str) -> str:
    """Rename `source` over `target` in one folder: a rename needs no free space on the disk."""
    return f"mv -f -- {path(source)} {path(target)}"


def unwritable_folders(files: Iterable[str]) -> str:
    """Print each folder of `files` the host's user cannot write into (`test -w` is false on a
    read-only file system even for root): a patch writes a temporary file there and renames it."""
    folders = sorted({posixpath.dirname(f) or "/" for f in files})
    return f"for d in {' '.join(path(f) for f in folders)}; do [ -w \"$d\" ] || printf '%s\\n' \"$d\"; done; true"


# -- one file whole -----------------------------------------------------------------------------


def read_file(p: str) -> str:
    return f"if [ -e {path(p)} ]; then cat -- {path(p)}; else exit {NO_FILE}; fi"


def write_stdin(p: str, mode: int | None) -> str:
    """Stdin into `p` atomically: a temp file beside it (the old file's mode and owner, or `mode`),
    flushed, renamed over it."""
    folder, name = posixpath.split(p)
    keep = (f"chmod {mode:o} \"$t\"" if mode is not None else
            f"{{ [ ! -e {path(p)} ] || {{ chmod --reference={path(p)} \"$t\" && {{ chown --reference={path(p)} \"$t\" 2>/dev/null; true; }}; }}; }}")
    return (f"mkdir -p -- {path(folder or '.')} && t=$(mktemp {path(folder or '.')}/{quote('.' + name)}.XXXXXX.orch-tmp) "
            f"|| exit 1; {{ cat > \"$t\" && {keep} && sync -- \"$t\" && mv -f -- \"$t\" {path(p)}; }} || {{ rm -f -- \"$t\"; exit 1; }}")


def write_stdin_at(p: str, offset: int) -> str:
    """Stdin written into `p` from byte `offset` on, nothing cut (GNU dd): a big pushed file's bytes,
    sent by the controller's OpenSSH client. At their offsets, not appended: bytes a killed push's
    sender still delivers land where the resumed push writes the same bytes."""
    return f"dd of={path(p)} bs=1M seek={int(offset)} oflag=seek_bytes conv=notrunc status=none"


def stat_line(p: str) -> str:
    """`size mtime mode(octal) uid gid` of `p`; fails when it does not exist."""
    return f"stat -c '%s %Y %a %u %g' -- {path(p)}"


def untar_stdin(folder: str) -> str:
    return f"mkdir -p -- {path(folder)} && tar -x -C {path(folder)}"


# -- parts of files, many files at once ---------------------------------------------------------


def read_range(p: str, offset: int, length: int) -> str:
    """`length` bytes of a file from byte `offset` (a safetensors header without the tensors)."""
    return f"tail -c +{int(offset) + 1} -- {path(p)} | head -c {int(length)}"


def cat_files(paths: list[str]) -> str:
    """Each file as `<byte count>\\n<bytes>`, in order; `-1\\n` for one that is not a file."""
    files = " ".join(path(p) for p in paths)
    return f'for f in {files}; do if [ -f "$f" ]; then wc -c < "$f"; cat -- "$f"; else echo -1; fi; done'


def log_excerpt(p: str, pattern: str, tail: int) -> str:
    """A big log cut down on the host: the lines matching an extended regex (LC_ALL=C grep: bytewise,
    no locale decoding), then the log's end from the first line start in its last `tail` bytes."""
    f = path(p)
    return (f"s=$(stat -c %s -- {f}) || exit 1; t={int(tail)}; [ $t -gt $s ] && t=$s; "
            f"cut=$((s - t + $(tail -c $t -- {f} | head -n 1 | wc -c))); "
            f"head -c $cut -- {f} | LC_ALL=C grep -a -E -- {quote(pattern)}; tail -c +$((cut + 1)) -- {f}")


# -- listings and searches ----------------------------------------------------------------------


def list_dirs(folder: str) -> str:
    """Names of the folders directly in `folder`, one per line (none when missing)."""
    return f"find {path(folder)} -mindepth 1 -maxdepth 1 -type d -printf '%f\\n' 2>/dev/null; true"


def list_named(folder: str, suffix: str) -> str:
    """Names of the files directly in `folder` ending in `suffix`, one per line (none when missing)."""
    return f"find {path(folder)} -maxdepth 1 -type f -name {quote('*' + suffix)} -printf '%f\\n' 2>/dev/null; true"


def tree_listing(folder: str, skip: tuple[str, ...] = ()) -> str:
    """`size mtime relative-path` NUL-separated for every file under `folder` (nothing when missing),
    leaving out names matching the `skip` globs."""
    excluded = "".join(f" ! -name {quote(s)}" for s in skip)
    return f"cd {path(folder)} 2>/dev/null && find . -type f{excluded} -printf '%s %T@ %P\\0'; true"


def file_quoting(folder: str, name: str) -> str:
    """The first `*.py` file under `folder` holding `name` in quotes (a name its code looks for)."""
    pattern = f"[\"']{re.escape(name)}[\"']"
    return f"grep -rlE --include='*.py' -- {quote(pattern)} {path(folder)} 2>/dev/null | head -n 1; true"


# -- hashes -------------------------------------------------------------------------------------


def sha256_each(folder: str, relatives: list[str]) -> str:
    """One sha256 per line for each file under `folder`, in order; `-` for a file that cannot be read."""
    files = " ".join(quote(r) for r in relatives)
    return (f"cd {path(folder)} || exit 1; for f in {files}; do "
            f"h=$(sha256sum < \"$f\" 2>/dev/null) || h=-; echo \"${{h%% *}}\"; done")


def sha256_prefix(p: str, length: int) -> str:
    """The sha256 of a file's first `length` bytes."""
    return f"head -c {int(length)} -- {path(p)} | sha256sum"


def flag_sources(folder: str, patterns: tuple[str, ...]) -> str:
    """`sha256  relative-path` of each file under `folder` matching the globs (the files that
    declare an engine's flags), sorted, one per line; nothing when none exist."""
    for p in patterns:  # globs are expanded by the shell; they come from our own constant, never a user
        if any(c in p for c in " ;&|$`'\"\\"):
            raise ValueError(f"unsafe glob {p!r}")
    globs = " ".join(patterns)
    return f"cd {path(folder)} 2>/dev/null || exit 0; for f in {globs}; do [ -f \"$f\" ] && sha256sum -- \"$f\"; done; true"
