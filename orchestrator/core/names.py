"""Names that reach a host's files and scripts (experiment, variant, host): identifiers only.

A name ends up in run folders, launch-script comments, lock records and table cells; keeping it to
`[A-Za-z0-9._-]` means no quoting mistake anywhere can turn one into shell text or a path."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import SpecError

IDENTIFIER = re.compile(r"[A-Za-z0-9._-]+")


def identifier(value: Any, where: str, what: str, fix: str) -> str:
    """`value` when it is an identifier; else a SpecError naming `where`, `what` and the `fix`."""
    if isinstance(value, str) and IDENTIFIER.fullmatch(value) and value not in (".", ".."):
        return value
    raise SpecError(f"{where}: {what} {value!r} is not a name: use letters, digits, '.', '_' and '-' only; {fix}")
