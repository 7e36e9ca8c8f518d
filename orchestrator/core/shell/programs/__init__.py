"""The Python programs orch runs on hosts, one file each: linted and tested as code, sent to a host
as the text of `python -c PROGRAM ARGS...` (nothing is copied there first).

orch never imports them (a program here runs when it is loaded); `source` reads one as text. A
program may take a part another file holds with `from .part import name`: on its way to a host
that line is replaced by the part's text, so one `-c` carries all it needs, while the files stay
modules that run as they are (`python -m orchestrator.core.shell.programs.facts ...`).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_PART_IMPORT = re.compile(r"^from \.(\w+) import \w+(?:, \w+)*$", re.MULTILINE)


@cache
def source(name: str) -> str:
    """The text of the program `name` (`name.py` here) as a host runs it: its parts inlined."""
    text = resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")
    return _PART_IMPORT.sub(lambda part: source(part.group(1)), text)
