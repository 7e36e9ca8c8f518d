"""An SGLang log's own print of its arguments (`server_args=ServerArgs(...)`, or 0.5.23's `{...}`
dict) turned back into the run's params and the equivalent launch command (`orch import`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from . import serverargs

# server args copied into the run's params, under the names the experiment files use
PARAMS_FROM_ARGS = {
    "model_path": "model_path", "speculative_draft_model_path": "draft_model_path", "tp_size": "tp_size",
    "mem_fraction_static": "mem_fraction_static", "speculative_algorithm": "speculative_algorithm",
    "speculative_num_steps": "speculative_num_steps", "speculative_eagle_topk": "speculative_eagle_topk",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens", "port": "port",
}




def launch_of(text: str | None, where: str) -> tuple[dict[str, Any], str, list[str]]:
    """The params (under the names experiment files use), the launch command and the warnings."""
    args, warnings = args_warnings(text, where)
    params = {mine: args[theirs] for theirs, mine in PARAMS_FROM_ARGS.items() if args.get(theirs) is not None}
    return params, launch_command(args) if args else "", warnings


def server_args(text: str | None) -> dict[str, Any]:
    """`ServerArgs(model_path='m', tp_size=8, ...)` or `{'model_path': 'm', ...}` -> {field: value}
    (see `serverargs.parse`)."""
    return serverargs.parse(text).values


def args_warnings(text: str | None, where: str) -> tuple[dict[str, Any], list[str]]:
    """The server args of a log's `server_args=` line, and what to tell the user when they could not
    all be read."""
    if text is None:
        return {}, [f"{where}: no `server_args=` line (the log may start after the server did): params and the "
                    "launch command are not rebuilt; give --params key=value for the ones that matter"]
    parsed = serverargs.parse(text)
    if parsed.form is None:
        return {}, [f"{where}: the `server_args=` line is neither `ServerArgs(...)` (SGLang up to 0.5.22) nor a "
                    f"`{{...}}` dict (0.5.23): params and the launch command are not rebuilt; give --params "
                    "key=value for the ones that matter"]
    if parsed.cut:
        return parsed.values, [f"{where}: the `server_args=` line is cut short: params and the launch command "
                               f"hold only its first {len(parsed.values)} fields"]
    return parsed.values, []


def launch_command(args: dict[str, Any]) -> str:
    """The equivalent `python -m sglang.launch_server` command: every field that is set (not None
    and not False), as a flag."""
    words = ["python", "-m", "sglang.launch_server"]
    for name, value in args.items():
        if value is None or value is False or value == [] or value == {}:
            continue
        words.append("--" + name.replace("_", "-"))
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            words += [str(v) for v in value]
        else:
            words.append(json.dumps(value) if isinstance(value, dict) else str(value))
    return shlex.join(words)
