"""Serving engines behind one seam (`base.Engine`); one subpackage per engine, found by name.

The registry (`registry.py`) is the data: names, templates, where the preflight codes live. `get`
is the one door to an engine object; it imports the engine's module only when asked for it. The
engines' rehearsal stand-ins are not here: they live in `orchestrator.rehearsal`.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from .registry import DEFAULT as DEFAULT, KNOWN as KNOWN, Entry as Entry, load, preflight_codes as preflight_codes

if TYPE_CHECKING:  # the annotation only: an engine's module is loaded when asked for
    from .base import Engine


@cache
def get(name: str = DEFAULT) -> Engine:
    """The engine called `name` (one of KNOWN; the spec checks the name before it gets here)."""
    engine: Engine = load(KNOWN[name].engine)()  # type: ignore[operator]
    return engine
