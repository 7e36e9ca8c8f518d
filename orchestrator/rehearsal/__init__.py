"""The rehearsal stand-ins: CPU programs that act as an engine's package on a rehearsal host, so
an experiment runs end to end with no GPU and no real engine installed.

Layout: `standin.py` (StandIn: how a stand-in's tree is laid out and assembled), one declaration
per engine (`sglang.py`, `vllm.py`: its tree, default release and checkpoint maker) and the trees
themselves under `trees/<engine>/` (programs copied to hosts, never imported by orch).

The engines know nothing of their stand-ins: the inventory asks `releases()` which releases a
`rehearsal:` host may name, and the host's installer asks `stand_in(engine)` for the tree to copy.
This package imports nothing of orch's but its own modules (reading files only)."""

from __future__ import annotations

from functools import cache

from . import sglang, vllm
from .standin import StandIn

STAND_INS: dict[str, StandIn] = {"sglang": sglang.STAND_IN, "vllm": vllm.STAND_IN}  # by engine name


def stand_in(engine: str) -> StandIn | None:
    """The stand-in of the engine called `engine`; None for an engine that has none."""
    return STAND_INS.get(engine)


@cache
def releases() -> dict[str, tuple[tuple[str, ...], str]]:
    """Each engine's emulated releases (oldest first) and its default one."""
    return {name: (each.releases(), each.default_release) for name, each in STAND_INS.items()}
