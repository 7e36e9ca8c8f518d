"""`orch run --wait [TIMEOUT]`: the one option whose value may be left out.

Click (inside typer) has no option with an optional value, so `main` rewrites a bare `--wait`
(last, or followed by another option) into `--wait=DEFAULT_WAIT_S` before typer parses the line;
`seconds` then reads the value with a one-line error."""

from __future__ import annotations

import math

from orchestrator.errors import SpecError

DEFAULT_WAIT_S = 3600.0  # a bare `--wait`: an hour, the length of a long sweep someone else runs
FLAG = "--wait"


def with_values(argv: list[str]) -> list[str]:
    """`argv` with each bare `--wait` given the default value (the text after `--` is left alone)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        following = argv[i + 1] if i + 1 < len(argv) else None
        bare = following is None or (following.startswith("-") and not _number(following))
        out.append(f"{FLAG}={DEFAULT_WAIT_S:g}" if arg == FLAG and bare else arg)
    return out


def seconds(value: str | None) -> float | None:
    """The wait `--wait` asks for, in seconds (None without the option); a bad value is a SpecError."""
    if value is None:
        return None
    if not _number(value) or float(value) < 0:
        raise SpecError(f"--wait {value!r}: not a number of seconds; give `--wait 600`, or `--wait` alone "
                        f"(last, or before another option) for {DEFAULT_WAIT_S:.0f} s")
    return float(value)


def _number(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except ValueError:
        return False
