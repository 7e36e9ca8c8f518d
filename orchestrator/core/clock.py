"""Times and run names, written the same way everywhere: UTC, ISO 8601 to the millisecond."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, UTC


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_uid(variant: str) -> str:
    """A run's name, and its folder's on the host: `20261129-114201-aux-fix-3fa9c1` (sortable by
    start, the variant readable, unique)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', variant)[:40]}-{secrets.token_hex(3)}"
