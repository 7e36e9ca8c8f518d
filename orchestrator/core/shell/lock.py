"""The host lock (`host/lock.py`): a file taken, renewed, released and broken atomically on the
host, its lease read by the host's own clock."""

from __future__ import annotations

import posixpath

from .quoting import path, quote

LOCK_MARKER = "__ORCH_LOCK__"


def lock_take(lock: str, content: str) -> str:
    """Create `lock` holding `content` only if it does not exist. The content is written whole to a
    temporary file first and then hard-linked into place (link(2) fails if `lock` exists: atomic
    on the host), so a full disk or a crash mid-write never leaves an empty or cut lock; where the
    filesystem has no hard links, noclobber creates `lock` from the complete file (an O_EXCL create).
    On a failed write, exit 1 with the shell's error; on a lock already there, print its state
    (see `lock_state`)."""
    folder, final = path(posixpath.dirname(lock)), path(lock)
    return (
        f"mkdir -p -- {folder} || exit 1; t={final}.$$.new; "
        f"printf '%s\\n' {quote(content)} > \"$t\" || {{ rm -f -- \"$t\"; exit 1; }}; "
        f"if ln -- \"$t\" {final} 2>/dev/null || {{ [ ! -e {final} ] && ( set -o noclobber; cat -- \"$t\" > {final} ) 2>/dev/null; }}; "
        f"then rm -f -- \"$t\"; echo {LOCK_MARKER} taken; else rm -f -- \"$t\"; {lock_state(lock)}; fi"
    )


def lock_state(lock: str) -> str:
    """`__ORCH_LOCK__ held <host now> <lock mtime>` then the lock's content, both by the host's
    clock (so the lease never depends on the controller's clock); `__ORCH_LOCK__ free` if absent."""
    return (
        f"m=$(stat -c %Y -- {path(lock)} 2>/dev/null) || {{ echo {LOCK_MARKER} free; exit 0; }}; "
        f"echo {LOCK_MARKER} held $(date +%s) $m; cat -- {path(lock)} 2>/dev/null; true"
    )


def lock_renew(lock: str, token: str, content: str) -> str:
    """Rewrite `lock` (new content, fresh mtime) if it still holds `token`; exit 1 if it does not.
    The new content is written whole, then renamed over the lock; where it cannot be written (a
    full disk) the temporary file goes and the lock's mtime alone is refreshed, which keeps the
    lease without needing space."""
    tmp = path(f"{lock}.{token}.tmp")
    return (
        f"grep -qF -- {quote(token)} {path(lock)} 2>/dev/null || exit 1; "
        f"{{ printf '%s\\n' {quote(content)} > {tmp} && mv -f -- {tmp} {path(lock)}; }} 2>/dev/null "
        f"|| {{ rm -f -- {tmp}; touch -c -- {path(lock)}; }}"
    )


def lock_release(lock: str, token: str) -> str:
    """Remove `lock` only if it still holds `token` (a lock broken and retaken by another stays)."""
    return f"grep -qF -- {quote(token)} {path(lock)} 2>/dev/null && rm -f -- {path(lock)}; true"


def lock_break(lock: str, content: str) -> str:
    """Remove a stale `lock` only if it still holds exactly the `content` judged stale (as `$( )`
    reads it: without NUL bytes, which no command line can carry, and trailing newlines)."""
    seen = content.replace("\0", "").rstrip("\n")
    return f"[ \"$(cat -- {path(lock)} 2>/dev/null)\" = {quote(seen)} ] 2>/dev/null && rm -f -- {path(lock)}; true"
