"""Serving engines behind one seam (`base.Engine`); one subpackage per engine, found by name."""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Engine

DEFAULT = "sglang"
KNOWN = {  # name -> "module:class", imported on first use (an engine's modules cost startup time)
    "sglang": "orchestrator.engines.sglang.engine:SglangEngine",
    "vllm": "orchestrator.engines.vllm.engine:VllmEngine",
}


@cache
def get(name: str = DEFAULT) -> Engine:
    """The engine called `name` (one of KNOWN; the spec checks the name before it gets here)."""
    module, _, cls = KNOWN[name].partition(":")
    engine: Engine = getattr(importlib.import_module(module), cls)()
    return engine
