"""The OpenAI server's command line (rehearsal): FrontendArgs' fields become flags in a loop, then
the engine's, as `make_arg_parser` builds them in vLLM."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, fields
from typing import Optional

from vllm.engine.arg_utils import AsyncEngineArgs


@dataclass
class FrontendArgs:
    host: Optional[str] = None
    port: int = 8000
    uvicorn_log_level: str = "info"
    disable_uvicorn_access_log: bool = False
    api_key: Optional[str] = None
    chat_template: Optional[str] = None
    response_role: str = "assistant"

    @staticmethod
    def add_cli_args(parser):
        frontend_kwargs = get_kwargs(FrontendArgs)
        frontend_group = parser.add_argument_group(title="Frontend")
        for key, value in frontend_kwargs.items():
            frontend_group.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser


def get_kwargs(cls) -> dict[str, dict]:
    out = {}
    for f in fields(cls):
        if f.type in ("bool", bool):
            out[f.name] = {"action": argparse.BooleanOptionalAction, "default": f.default}
        else:
            kind = int if f.type in ("int", int) else str
            out[f.name] = {"type": kind, "default": f.default}
    return out


class FlexibleArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that allows both underscore and dash in names."""

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        fixed = [re.sub(r"^--[^=.]+", lambda m: m.group(0).replace("_", "-"), a) if a.startswith("--") else a for a in args]
        return super().parse_args(_dotted_as_json(fixed), namespace)


def _dotted_as_json(args: list[str]) -> list[str]:
    """`--json-arg.key value` (or `=value`): the keys of one flag merged into one dict, put back at the
    end as `--json-arg JSON`, so it wins over a whole `--json-arg '{...}'` (vLLM's parse_args)."""
    kept, merged, i = [], {}, 0
    while i < len(args):
        arg = args[i]
        i += 1
        flag, eq, text = arg.partition("=")
        if not (flag.startswith("--") and "." in flag):
            kept.append(arg)
            continue
        if not eq and i < len(args):
            text, i = args[i], i + 1
        key, *keys = flag.split(".")
        if keys[-1].endswith("+"):
            keys[-1], value = keys[-1][:-1], text.split(",")
        else:
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        into = merged.setdefault(key, {})
        for name in keys[:-1]:
            into = into.setdefault(name, {})
        into[keys[-1]] = into[keys[-1]] + value if isinstance(value, list) and isinstance(into.get(keys[-1]), list) else value
    for key, value in merged.items():
        kept += [key, json.dumps(value)]
    return kept


def make_arg_parser(parser):
    parser.add_argument("model_tag", type=str, nargs="?")
    parser.add_argument("--headless", action="store_true", default=False)
    parser.add_argument("--api-server-count", "-asc", type=int, default=1)
    parser.add_argument("--config", default=None)
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
