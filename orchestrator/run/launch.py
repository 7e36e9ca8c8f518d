"""What a run's launch script was rendered with, read once into typed fields: the `Launch` the
stages read instead of the render context's keys (`execute.run_context` builds that context; the
template still renders from it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.spec import port_of, tp_size_of
from orchestrator.host import overlay


@dataclass(frozen=True)
class Launch:
    """One node's launch as rendered: where it runs, on which port and GPUs, with which env."""

    run_dir: str  # the run's folder on the host: its pid file, its log, the tool's output
    port: int
    pinned: str | None  # the GPUs a slot pinned the run to (`slots.py`); None: the host's as they come
    tp_size: int
    params: dict[str, Any]  # the rendered params, as the run row records them
    env: dict[str, str]  # the launch environment, the host's and the plan's
    secret_names: tuple[str, ...]
    checkpoints: dict[str, str]  # each checkpoint's rendered dest on the host, by name
    isolated: bool  # the run patches its own copy of the packages (`host/overlay.py`), not the installed files
    site: str | None  # that copy's folder, first on the run's PYTHONPATH

    @property
    def visible(self) -> str | None:
        """The devices the launch environment makes visible, when it says."""
        return self.env.get("CUDA_VISIBLE_DEVICES")

    @property
    def gpus(self) -> str:
        """The run's GPUs as a row shows them: the visible devices when pinned, else how many."""
        return str(self.pinned or self.visible or f"{self.tp_size} (any)")


def of(context: Mapping[str, Any]) -> Launch:
    """The Launch a render context describes (a part of one, as a test may give, reads as empty)."""
    params = context.get("params", {})
    return Launch(
        run_dir=context.get("run", {}).get("dir", ""), port=port_of(params), pinned=context.get("gpus"),
        tp_size=tp_size_of(params), params=params, env=context.get("env", {}),
        secret_names=tuple(context.get("secret_names", ())), checkpoints=context.get("checkpoints", {}),
        isolated=overlay.PARAM in params, site=params.get(overlay.PARAM),
    )
