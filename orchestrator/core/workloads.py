"""The workload of an experiment: its record, the fields read from `workload:`, and the fields a
variant, a matrix point or `--set` may vary per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError

from . import datasets, readers, yamlfile
from .yamlfile import Located

WORKLOAD_PREFIX = "workload."  # a matrix or --set key `workload.concurrency` varies the workload, not a param


@dataclass(frozen=True)
class Workload:
    requests: int = 8
    max_new_tokens: int = 64
    concurrency: int = 4
    temperature: float = 0.0
    prompts: str | None = None
    tool: str | None = None  # the engine's own benchmark tool instead of orch's requests (`run/tool.py`)
    args: dict[str, Any] = field(default_factory=dict)  # its arguments, `--` + name (`_` as `-`) unless written with `-`
    endpoint: str = "generate"  # "generate": the engine's native text endpoint; "chat": OpenAI chat completions
    top_p: float | None = None  # sampling settings beyond temperature: sent only when set
    top_k: int | None = None
    dataset: str | None = None  # a local benchmark file (core/datasets.py): its conversations replace `requests`
    format: str = "jsonl"
    num_prompts: int | None = None  # conversations drawn from the dataset; None: all of them
    seed: int = 0  # of that draw



WORKLOAD_FIELDS = {"requests": int, "max_new_tokens": int, "concurrency": int, "temperature": float, "top_p": float,
                   "top_k": int, "num_prompts": int, "seed": int}


def check_fields(fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Workload fields a variant, a matrix point or --set gives: known names, positive whole numbers
    (a temperature: a number >= 0). The prompts file is the experiment's alone."""
    checked: dict[str, Any] = {}
    for name, value in fields.items():
        kind = WORKLOAD_FIELDS.get(name)
        if kind is None:
            known = ", ".join(f"workload.{k}" for k in WORKLOAD_FIELDS)
            raise SpecError(f"{where}: unknown workload field {name!r}; these can vary per run: {known}")
        least = 0 if name == "seed" else 1
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise SpecError(f"{where}: workload.{name} must be a whole number >= {least}, got {value!r}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise SpecError(f"{where}: workload.{name} must be a number >= 0, got {value!r}")
        checked[name] = kind(value)
    return checked



WORKLOAD_KEYS = {"requests", "max_new_tokens", "concurrency", "temperature", "prompts", "endpoint", "top_p", "top_k",
                 "dataset", "format", "num_prompts", "seed", "tool", "args"}
ENDPOINTS = ("generate", "chat")


def sweeps(data: Located) -> dict[str, tuple[Any, ...]]:
    """`workload: {concurrency: [1, 4, 16]}`: a list of values for a field that can vary per run is a
    matrix axis `workload.concurrency` (one run per value; with server reuse, all on one server)."""
    body, matrix = readers.mapping(data, "workload"), readers.mapping(data, "matrix")
    sweeps = {}
    for name in WORKLOAD_FIELDS:
        values = body.get(name)
        if not isinstance(values, list):
            continue
        key = WORKLOAD_PREFIX + name
        if key in matrix:
            raise SpecError(f"{body.where(name)}: `workload.{name}` is a list here and a matrix key "
                            f"({matrix.where(key)}); keep one")
        if not values:
            raise SpecError(f"{body.where(name)}: `workload.{name}` is an empty list; give one value or several")
        for value in values:
            check_fields({name: value}, body.where(name))
        sweeps[key] = tuple(values)
    return sweeps


def read(data: Located, path: Path) -> Workload:
    given = readers.mapping(data, "workload")
    yamlfile.check_keys(given, WORKLOAD_KEYS, "workload")
    body = Located({k: v for k, v in given.items() if not (k in WORKLOAD_FIELDS and isinstance(v, list))},
                   source=given.source, line=given.line)  # the lists are matrix axes (sweeps)
    body.lines = given.lines
    files = {}
    for key in ("prompts", "dataset"):
        if body.get(key) is not None:
            found = path.parent / str(body.get(key))
            if not readers.is_file(found):
                raise SpecError(f"{body.where(key)}: {key} file {found} not found")
            files[key] = str(found)
    endpoint, fmt = body.get("endpoint", "generate"), body.get("format", "jsonl")
    if endpoint not in ENDPOINTS:
        raise SpecError(f"{body.where('endpoint')}: `endpoint` must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
    if fmt not in datasets.FORMATS:
        raise SpecError(f"{body.where('format')}: `format` must be one of {', '.join(datasets.FORMATS)}, got {fmt!r}")
    if "dataset" in files and ("prompts" in files or "requests" in body):
        other = "prompts" if "prompts" in files else "requests"
        raise SpecError(f"{body.where('dataset')}: `dataset` and `{other}` both say what to send; keep `dataset` "
                        f"(with `num_prompts` for how many)")
    optional = check_fields({k: body[k] for k in ("top_p", "top_k", "num_prompts", "seed") if body.get(k) is not None},
                                body.where("workload"))
    if optional.get("top_p", 0.5) > 1:
        raise SpecError(f"{body.where('top_p')}: `top_p` must be at most 1, got {optional['top_p']!r}")
    workload = Workload(
        requests=readers.positive_int(body, "requests", 8),
        max_new_tokens=readers.positive_int(body, "max_new_tokens", 64),
        concurrency=readers.positive_int(body, "concurrency", 4),
        temperature=readers.number(body, "temperature", 0.0),
        prompts=files.get("prompts"), endpoint=str(endpoint), dataset=files.get("dataset"), format=str(fmt), **optional,
        **_tool(body),
    )
    if workload.dataset is not None:  # read now: a bad line is an error before any host changes
        datasets.conversations(workload.dataset, workload.format, workload.num_prompts, workload.seed)
    return workload


def _tool(body: Located) -> dict[str, Any]:
    """`tool:` (a name the engine checks against the host's release) and its `args:` (a value, a list
    for several, `true` for a switch); the tool sends its own requests, so no prompts or dataset."""
    tool, args = body.get("tool"), body.get("args")
    if tool is None:
        if args is not None:
            raise SpecError(f"{body.where('args')}: `args` are a benchmark tool's; add `tool:`, the engine's benchmark tool")
        return {}
    if not isinstance(tool, str) or not tool.strip():
        raise SpecError(f"{body.where('tool')}: `tool` must be the name of one of the engine's benchmark tools, got {tool!r}")
    other = next((k for k in ("prompts", "dataset") if body.get(k) is not None), None)
    if other:
        raise SpecError(f"{body.where(other)}: `{other}` is orch's own workload; the tool reads its own dataset: "
                        f"give it in `args` (e.g. dataset-name, dataset-path)")
    args = yamlfile.require_mapping(args if args is not None else {}, body.where("args"), "`args`")
    scalar = (str, int, float, bool)
    for key, value in args.items():
        values = value if isinstance(value, list) else [value]
        if not isinstance(key, str) or not key.strip("-") or any(c.isspace() for c in key) or \
                not all(isinstance(v, scalar) for v in values):
            raise SpecError(f"{args.where(key)}: args {key!r}: expected `name: value` (a number, text, a list of "
                            f"them, or true for a switch), got {value!r}")
    return {"tool": tool.strip(), "args": {k: list(v) if isinstance(v, list) else v for k, v in args.items()}}
