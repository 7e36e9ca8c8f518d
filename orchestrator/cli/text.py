"""Text from a host, a log or a run made safe to print: control characters shown as escapes, rich
markup escaped.

A server's log, a host's error or a file name on the host can hold ESC sequences (recolour the
terminal, set its title, write its clipboard), BEL, CR and BS (overprint what was printed, so a line
reads other than it is), and `[...]` that rich would take as markup. Everything printed that came
from outside orch goes through `line` (one line: newline and tab shown too) or `block` (several
lines: newline and tab kept), or `visible` where rich markup is not in play (raw output)."""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls; newline and tab are kept in a block
_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_IN_BLOCK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char, f"\\x{ord(char):02x}")


def visible(text: object, *, block: bool = False) -> str:
    """`text` with its control characters as escapes (`\\x1b`, `\\r`); in a block newline and tab stay."""
    return (_IN_BLOCK if block else _IN_LINE).sub(_shown, str(text))


def line(text: object) -> str:
    """One line of outside text for rich: controls visible (newline too), markup escaped."""
    return _escaped(visible(text))


def block(text: object) -> str:
    """Lines of outside text for rich: controls visible but newline and tab, markup escaped."""
    return _escaped(visible(text, block=True))


def _escaped(shown: str) -> str:
    """`shown` as rich markup that prints it as it is, whatever markup follows. rich's escape
    doubles a single trailing backslash (lest it escape a tag after it), which then prints doubled
    where nothing follows: a script's `\\` continuation read `\\\\`. rich reads 2n backslashes before
    a tag as n, so a trailing run is doubled and closed by an empty tag of its own."""
    from rich.markup import escape  # on use: a command that prints JSON never loads rich

    body = shown.rstrip("\\")
    if len(body) == len(shown):
        return escape(shown)
    return escape(body) + "\\" * (2 * (len(shown) - len(body))) + "[dim][/dim]"


def fmt(value: object) -> str:
    """A value as a table cell shows it: `-` for none, a float to three places (one from 100 on)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1:
            return str(int(value))
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)
