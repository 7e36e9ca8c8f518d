"""The repo's SGLang launch template rendered as orch renders it for the demo on an 8-GPU host."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT
from orchestrator.core import render
from orchestrator.core.inventory import Host

TEMPLATE = ROOT / "templates" / "sglang_launch.sh.j2"
DEMO_PARAMS = {
    "model_path": "/models/kimi", "draft_model_path": "/models/draft", "tp_size": 8, "mem_fraction_static": 0.85,
    "num_continuous_decode_steps": 1, "disable_cuda_graph": True, "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "port": 30000,
}


def script(template: Path = TEMPLATE, **params) -> str:
    """`template` rendered with the demo's params, `params` over them."""
    host = Host(name="gpu-1", transport="local", python="/venv/bin/python", gpus=8)
    context = {"host": host.context(), "run": {"uid": "u", "dir": "/tmp/r", "log": "/tmp/r/server.log"},
               "experiment": "e", "variant": "v", "env": {}, **DEMO_PARAMS, **params}
    context["params"] = dict(context)
    return render.render_file(template, context)
