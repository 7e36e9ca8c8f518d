"""Serving engines behind one seam (`base.Engine`); one subpackage per engine, found by name.

This registry is what the rest of orch may know of engines without importing one: their names, the
launch template each ships, and where its preflight finding codes live (read on first use).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Engine


@dataclass(frozen=True)
class Entry:
    engine: str  # "module:class"
    template: str  # the launch template under the project's templates/ folder
    codes: str  # "module:NAME" of the preflight finding codes an experiment may allow
    rehearsal: str  # the module of its rehearsal stand-in: `releases()` and `DEFAULT_RELEASE`, file reads only


DEFAULT = "sglang"
KNOWN = {
    "sglang": Entry("orchestrator.engines.sglang.engine:SglangEngine", "sglang_launch.sh.j2",
                    "orchestrator.engines.sglang.preflight:CODES", "orchestrator.engines.sglang.rehearsal"),
    "vllm": Entry("orchestrator.engines.vllm.engine:VllmEngine", "vllm_launch.sh.j2",
                  "orchestrator.engines.vllm.preflight:CODES", "orchestrator.engines.vllm.rehearsal"),
}


def _load(ref: str) -> object:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@cache
def get(name: str = DEFAULT) -> Engine:
    """The engine called `name` (one of KNOWN; the spec checks the name before it gets here)."""
    engine: Engine = _load(KNOWN[name].engine)()  # type: ignore[operator]
    return engine


@cache
def preflight_codes(name: str) -> tuple[str, ...]:
    """Every code the engine's preflight findings can carry."""
    codes = _load(KNOWN[name].codes)
    return tuple(codes) if isinstance(codes, tuple) else ()


@cache
def rehearsal_releases() -> dict[str, tuple[tuple[str, ...], str]]:
    """Each engine's emulated releases (oldest first) and its default one."""
    found = {}
    for name, entry in KNOWN.items():
        module = importlib.import_module(entry.rehearsal)
        found[name] = (tuple(module.releases()), str(module.DEFAULT_RELEASE))
    return found
