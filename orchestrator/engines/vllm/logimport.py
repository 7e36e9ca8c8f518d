"""`orch import` of a hand-made vLLM log: its `non-default args: {...}` line (a Python dict repr,
0.10.1.1 `vllm/entrypoints/utils.py:326`, 0.33.0 `entrypoints/common/startup.py:96`) -> the run's
params under the names `templates/vllm_launch.sh.j2` uses, the equivalent `vllm serve` command, and
warnings for what could not be read."""

from __future__ import annotations

import ast
import json
import shlex

# vLLM's argument name -> the experiment param the template reads
PARAMS = {"model": "model_path", "model_tag": "model_path", "tensor_parallel_size": "tp_size", "port": "port",
          "max_model_len": "max_model_len", "gpu_memory_utilization": "gpu_memory_utilization",
          "host": "server_host", "trust_remote_code": "trust_remote_code"}
SPEC = {"method": "speculative_method", "model": "draft_model_path", "num_speculative_tokens": "num_speculative_tokens"}


def parsed(launch_args: str | None) -> dict[str, object]:
    """The `non-default args:` dict, or {} when there is none or it is not a dict literal."""
    try:
        args = ast.literal_eval((launch_args or "").strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return {str(k): v for k, v in args.items()} if isinstance(args, dict) else {}


def launch_of(launch_args: str | None, where: str) -> tuple[dict[str, object], str, list[str]]:
    if not launch_args:
        return {}, "", [f"{where}: no `non-default args:` line; the launch command is unknown"]
    try:
        args = ast.literal_eval(launch_args.strip())
    except (ValueError, SyntaxError):
        return {}, "", [f"{where}: the `non-default args:` line is not a Python dict; the launch command is unknown"]
    if not isinstance(args, dict):
        return {}, "", [f"{where}: the `non-default args:` line is not a dict"]
    params: dict[str, object] = {}
    warnings: list[str] = []
    for name, value in args.items():
        if name in PARAMS:
            params[PARAMS[name]] = value
        elif name == "speculative_config" and isinstance(value, dict):
            params.update({SPEC[k]: v for k, v in value.items() if k in SPEC})
            warnings += [f"{where}: speculative_config key {k!r} has no experiment param (kept in the command)"
                         for k in value if k not in SPEC]
        else:
            warnings.append(f"{where}: argument {name} has no experiment param (kept in the command)")
    return params, command(args), warnings


def command(args: dict[str, object]) -> str:
    model = args.get("model_tag") or args.get("model") or "MODEL"
    words = ["vllm", "serve", str(model)]
    for name, value in args.items():
        if name in ("model", "model_tag"):
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is False:
            words.append("--no-" + name.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            words += [flag, json.dumps(value)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)
