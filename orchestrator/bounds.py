"""How long one stored line may be. A server may print a line of any length (a debug print of a whole
tensor, a 100 MB repr); kept whole it would fill the database, `orch show` and the report with it.
A line over the bound keeps its head and a marker saying how much was cut; the server log itself is
stored as it was, for `orch logs`."""

from __future__ import annotations

from collections.abc import Mapping

LINE_BOUND = 64 * 1024  # characters of one stored debug or log line


def cut_line(text: str, bound: int = LINE_BOUND) -> str:
    """`text` when within `bound`, else its first `bound` characters and a marker naming the cut."""
    if len(text) <= bound:
        return text
    return f"{text[:bound]} [... {len(text) - bound} more characters cut by orch: line over {bound}]"


def cut_values(fields: Mapping[str, str], bound: int = LINE_BOUND) -> dict[str, str]:
    """Each value (and key) of a debug line's fields cut like a line."""
    return {cut_line(str(k), bound): cut_line(v, bound) if isinstance(v, str) else v for k, v in fields.items()}
