"""The engine registry as data: each engine's name, the launch template it ships, and the module of
its preflight finding codes, as strings read on first use (its rehearsal stand-in, if any, lives in
`orchestrator.rehearsal`, which no engine module imports).

This is what the rest of orch (core among it) may know of engines without importing one; it names
no engine class, so it closes no import circle with the engine seam (`engines.get`, which hands
back an Engine, lives in the package's `__init__.py`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Entry:
    engine: str  # "module:class"
    template: str  # the launch template under the project's templates/ folder
    codes: str  # "module:NAME" of the preflight finding codes an experiment may allow
    # what the engine's print of its arguments holds a value of its own choosing in at each start,
    # unless the command sets it: two runs differ in it only because they ran (`orch diff` hides it)
    picked_at_start: tuple[str, ...] = ()


DEFAULT = "sglang"
KNOWN = {
    "sglang": Entry("orchestrator.engines.sglang.engine:SglangEngine", "sglang_launch.sh.j2",
                    "orchestrator.engines.sglang.preflight:CODES", picked_at_start=("random_seed",)),
    "vllm": Entry("orchestrator.engines.vllm.engine:VllmEngine", "vllm_launch.sh.j2",
                  "orchestrator.engines.vllm.preflight:CODES"),
}


def load(ref: str) -> object:
    """The object a "module:name" reference names, its module imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@cache
def preflight_codes(name: str) -> tuple[str, ...]:
    """Every code the engine's preflight findings can carry."""
    codes = load(KNOWN[name].codes)
    return tuple(codes) if isinstance(codes, tuple) else ()
