"""A run's render context: what its launch script renders with on a host (and, for a run over
several hosts, on each node). The stages read it once, typed, as the Attempt's `Launch`."""

from __future__ import annotations

from typing import Any

from orchestrator.core import render, spec as specs
from orchestrator.core.inventory import Host
from orchestrator.core.spec import RunPlan, Spec
from orchestrator.host import overlay, server
from . import multinode


def run_context(spec: Spec, plan: RunPlan, host: Host, uid: str) -> dict[str, Any]:
    run_dir = f"{host.workdir}/runs/{uid}"
    base = {
        "host": host.context(),
        "run": {"uid": uid, "dir": run_dir, "log": f"{run_dir}/{server.LOG_NAME}"},
        "experiment": spec.name,
        "variant": plan.variant,
    }
    base["checkpoints"] = {c.name: render.render_value(c.dest, base, f"{c.where}: checkpoint dest") for c in spec.checkpoints}
    params = {k: render.render_value(v, {**base, "params": plan.params}, f"{spec.path}: param {k}") for k, v in plan.params.items()}
    env = {**host.env, **{k: specs.resolve_controller_vars(v, f"{spec.path}: env {k}") for k, v in plan.env.items()}}
    if overlay.PARAM in params:  # an isolated run imports its own patched copy first (`host/overlay.py`)
        env["PYTHONPATH"] = ":".join(p for p in (params[overlay.PARAM], env.get("PYTHONPATH")) if p)
    return {**params, **base, "params": params, "env": env, "secret_names": (*spec.secrets, *host.secrets)}


def node_context(spec: Spec, plan: RunPlan, host: Host, uid: str, nodes: multinode.Nodes | None,
                  rank: int) -> dict[str, Any]:
    """The run's context on `host`, with node `rank`'s part of a run over several hosts."""
    context = run_context(spec, plan, host, uid)
    if nodes is not None:
        context.update(nodes.context(rank))
        context["params"]["nodes"] = nodes.count
    return context


def on_port(context: dict[str, Any], port: int) -> dict[str, Any]:
    """The context of a launch moved to `port` (its own was taken at the server's bind)."""
    return {**context, "port": port, "params": {**context["params"], "port": port}}
