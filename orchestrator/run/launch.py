"""One node's launch as a typed record, the `Launch` every stage reads: its host, its node of the
run, its port and GPUs, its env, the rendered launch command and the engine's reading of it. The
render context (`rendercontext.py`, what the template renders from) is read here once, by `of`;
no stage reads its keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.secrets import secret_values
from orchestrator.core.spec import port_of, tp_size_of
from orchestrator.host import overlay


@dataclass(frozen=True)
class Launch:
    """One node's launch as rendered: where it runs, on which port and GPUs, with which env and
    command, and what the host's engine reads that command to ask."""

    host: str  # the inventory name of the host the node runs on
    node: int  # its rank in a run over several hosts (`multinode.py`); 0 for every other run
    nodes: int  # the hosts the run spans; 1 for a run on one host
    run_dir: str  # the run's folder on the host: its pid file, its log, the tool's output
    port: int
    pinned: str | None  # the GPUs a slot pinned the run to (`slots.py`); None: the host's as they come
    tp_size: int
    params: dict[str, object]  # the rendered params, as the run row records them
    env: dict[str, str]  # the launch environment, the host's and the plan's
    secret_names: tuple[str, ...]
    checkpoints: dict[str, str]  # each checkpoint's rendered dest on the host, by name
    site: str | None  # the run's own patched copy of the packages (`host/overlay.py`), first on its PYTHONPATH
    command: str  # the rendered launch script, as the host runs it (a run on another's server: that server's)
    # the command's server options by the engine's own names, as the host's engine parses them
    # (`Engine.launch_args`): read once by the flag check (`asked`), rank 0's only; empty before,
    # and for a run on a server another run launched (it checks nothing)
    asked: Mapping[str, object] = field(default_factory=dict)

    @property
    def isolated(self) -> bool:
        """The run patches its own copy of the packages, not the installed files."""
        return self.site is not None

    @property
    def visible(self) -> str | None:
        """The devices the launch environment makes visible, when it says."""
        return self.env.get("CUDA_VISIBLE_DEVICES")

    @property
    def gpus(self) -> str:
        """The run's GPUs as a row shows them: the visible devices when pinned, else how many."""
        return str(self.pinned or self.visible or f"{self.tp_size} (any)")

    @property
    def secrets(self) -> dict[str, str]:
        """The secret values of its env by name: hidden from all the run prints and records."""
        return secret_values(self.env, self.secret_names)


def of(context: Mapping[str, Any], command: str, asked: Mapping[str, object] | None = None) -> Launch:
    """The Launch a render context and the command rendered from it describe (a part of a context,
    as a test may give, reads as empty); `asked`: the engine's reading, when it was read already."""
    params: dict[str, object] = context.get("params", {})
    site = params.get(overlay.PARAM)
    return Launch(
        host=str(context.get("host", {}).get("name", "")), node=int(context.get("node_rank", 0)),
        nodes=int(context.get("nnodes", 1)), run_dir=context.get("run", {}).get("dir", ""), port=port_of(params),
        pinned=context.get("gpus"), tp_size=tp_size_of(params), params=params, env=context.get("env", {}),
        secret_names=tuple(context.get("secret_names", ())), checkpoints=context.get("checkpoints", {}),
        site=None if overlay.PARAM not in params else str(site), command=command, asked=asked or {},
    )
