"""Experiment files -> frozen, validated specs; variants x matrix x repeats -> run plans."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import datasets, names as identifiers, objective as objectives, render, yamlfile
from .defaults import (DEFAULT_DEBUG_PATTERN as DEFAULT_DEBUG_PATTERN, HOST_SPECIFIC_PARAMS as HOST_SPECIFIC_PARAMS,
                       PATCHED_SITE as PATCHED_SITE)  # named as spec.* too
from orchestrator.engines import registry as engines
from orchestrator.errors import SpecError
from .yamlfile import Located

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROLLER_VAR = re.compile(r"\$?\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # `$${NAME}` matched too: the escape
PATCH_ACTIONS = ("replace", "insert_after", "insert_before")


@dataclass(frozen=True)
class PatchDef:
    """One named patch: `find` + an action, or a unified `diff` file."""

    name: str
    file: str
    where: str
    find: str | None = None
    action: str | None = None
    text: str | None = None
    count: int = 1
    diff: str | None = None


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


@dataclass(frozen=True)
class Variant:
    name: str
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    patches: tuple[str, ...] = ()
    expect: dict[str, str] = field(default_factory=dict)
    allow: tuple[str, ...] = ()  # `preflight: {allow: [code]}`: preflight errors acknowledged for this variant
    workload: dict[str, Any] = field(default_factory=dict)  # `workload:` fields set over the experiment's
    fresh_server: bool | None = None  # None: the experiment's `fresh_server`
    nodes: int | None = None  # None: the experiment's `nodes`


@dataclass(frozen=True)
class Spec:
    """An experiment file, read and checked: what to launch, on which hosts, with which params,
    patches, variants, matrix, workload and checkpoints."""

    name: str
    path: Path
    description: str
    hosts: tuple[str, ...]
    template: Path
    params: dict[str, Any]
    env: dict[str, str]
    patches: dict[str, PatchDef]
    variants: tuple[Variant, ...]
    matrix: dict[str, tuple[Any, ...]]
    repeats: int
    workload: Workload
    debug_pattern: str
    ready_timeout: float
    raw: dict[str, Any]
    checkpoints: tuple["CheckpointDef", ...] = ()
    preflight: bool = True  # the checkpoint checks before each run; `orch run --no-preflight` turns them off
    allow: tuple[str, ...] = ()  # `preflight: {allow: [code]}`: preflight errors acknowledged for every run
    allow_busy_gpus: bool = False  # `orch run --allow-busy-gpus`: GPUs held by others warn instead of stopping the run
    accept_drift: bool = False  # `orch run --accept-drift`: a file changed by hand since orch left it is patched as it is
    lock_wait_s: float | None = None  # `orch run --wait`: a host another orch command holds is waited for this long
    extra_params: tuple[str, ...] = ()  # params the template reads indirectly (so a matrix or --set key may name them)
    secrets: tuple[str, ...] = ()  # env names whose values are secret although their names do not say so
    engine: str = engines.DEFAULT  # `engine:` the serving engine (engines.KNOWN)
    fresh_server: bool = False  # `fresh_server: true`: every run launches its own server (no reuse)
    nodes: int = 1  # `nodes: N`: each run spans N hosts (run/multinode.py)
    template_folders: tuple[Path, ...] = ()  # `template_folders:` more folders a template may come from
    objective: objectives.Objective | None = None  # `objective:` what ranks configurations (None: throughput)


@dataclass(frozen=True)
class CheckpointDef:
    """A local folder pushed to `dest` on each run's host, after its transforms (see checkpoint.py)."""

    name: str
    src: Path
    dest: str  # may hold `{{ host.* }}`; rendered per host
    where: str
    transforms: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RunPlan:
    """One run to make: a variant with its final params, env and patches."""

    experiment: str
    variant: str
    params: dict[str, Any]
    env: dict[str, str]
    patches: tuple[PatchDef, ...]
    expect: dict[str, str]
    repeat: int
    hosts: tuple[str, ...]
    allow: tuple[str, ...] = ()  # preflight error codes that are reported and stored but do not stop the run
    point: dict[str, Any] = field(default_factory=dict)  # this plan's matrix values ({} without a matrix)
    fingerprint: str = ""  # what defines the run (plankey.fingerprint); "" until plankey.fingerprinted sets it
    workload: Workload | None = None  # the plan's workload (variant, matrix `workload.*`, --set); None: the experiment's
    fresh_server: bool = False  # launch a server of its own even when another plan's could serve it
    server_key: str = ""  # plans with the same key can use one server in turn (plankey.server_key)
    nodes: int = 1  # hosts the run spans (run/multinode.py); > 1: a fresh server, never reused

    @property
    def key(self) -> str:
        """The plan's stable name across invocations: experiment, variant, matrix point, repeat index
        (what `--resume` looks up; see plankey)."""
        return json.dumps([self.experiment, self.variant, self.point, self.repeat], sort_keys=True,
                          separators=(",", ":"), default=str)


TOP_KEYS = {
    "name", "description", "hosts", "template", "params", "env", "patches", "variants",
    "matrix", "repeats", "workload", "debug_pattern", "ready_timeout", "checkpoints", "preflight", "extra_params",
    "secrets", "engine", "fresh_server", "nodes", "objective", render.FOLDERS_KEY,
}
WORKLOAD_PREFIX = "workload."  # a matrix or --set key `workload.concurrency` varies the workload, not a param


def load(path: Path) -> Spec:
    """Load and validate an experiment file."""
    data = yamlfile.load(path)
    yamlfile.check_keys(data, TOP_KEYS, "the experiment")
    patches = _patches(data, path)
    engine = _engine(data)
    variants = _variants(data, patches, engine)
    template = Path(os.path.normpath(path.parent / str(data.get("template", f"../templates/{engines.KNOWN[engine].template}"))))
    if not _is_file(template):
        raise SpecError(f"{data.where('template')}: template {template} not found; fix `template:`")
    debug_pattern = str(data.get("debug_pattern", DEFAULT_DEBUG_PATTERN))
    try:
        re.compile(debug_pattern)
    except re.error as exc:
        raise SpecError(f"{data.where('debug_pattern')}: debug_pattern is not a valid regex: {exc}") from None
    return Spec(
        name=identifiers.identifier(data.get("name", path.stem), data.where("name"), "experiment name",
                                    "set `name:` to one, e.g. name: eagle_debug"),
        path=path,
        description=str(data.get("description", "")),
        hosts=_names(data, "hosts"),
        template=template,
        engine=engine,
        fresh_server=_bool(data, "fresh_server", False),
        nodes=_positive_int(data, "nodes", 1),
        params=dict(_mapping(data, "params")),
        env=_env(data, "env"),
        patches=patches,
        variants=variants,
        matrix=_matrix(data) | _workload_sweeps(data),
        repeats=_positive_int(data, "repeats", 1),
        workload=_workload(data, path),
        debug_pattern=debug_pattern,
        ready_timeout=float(_positive_number(data, "ready_timeout", 600)),
        raw=_plain(data),
        checkpoints=_checkpoints(data, path),
        allow=_allow(data, engine),
        extra_params=_names(data, "extra_params"),
        secrets=_env_names(data, "secrets"),
        template_folders=render.named_folders(data.get(render.FOLDERS_KEY), path.parent, data.where(render.FOLDERS_KEY)),
        objective=_objective(data),
    )


def _objective(data: Located) -> objectives.Objective | None:
    """`objective:` checked for its shape here, its metric names by plancheck (as `expect` keys)."""
    if "objective" not in data:
        return None
    value = data["objective"]
    body = value if isinstance(value, Located) else Located(source=data.source, line=data.line_of("objective"))
    return objectives.parse(value, lambda key: body.where(key) if key in body else data.where("objective"))


def expand(spec: Spec, overrides: Sequence[str] = (), variants: tuple[str, ...] = ()) -> list[RunPlan]:
    """Variants x matrix x repeats, in file order; `--set` overrides applied last."""
    params_set, env_set = parse_overrides(overrides)
    chosen = [v for v in spec.variants if not variants or v.name in variants]
    unknown = set(variants) - {v.name for v in spec.variants}
    if unknown:
        names = ", ".join(v.name for v in spec.variants)
        raise SpecError(f"{spec.path}: no variant named {', '.join(sorted(unknown))}; variants: {names}")
    keys = list(spec.matrix)
    combos = list(itertools.product(*(spec.matrix[k] for k in keys))) or [()]
    plans = []
    for variant in chosen:
        for combo in combos:
            for repeat in range(spec.repeats):
                params = {**spec.params, **variant.params, **dict(zip(keys, combo)), **params_set}
                env = {**spec.env, **variant.env, **env_set}
                workload = _plan_workload(spec, variant, params)
                plans.append(
                    RunPlan(
                        experiment=spec.name,
                        variant=variant.name,
                        params=params,
                        env=env,
                        patches=tuple(spec.patches[p] for p in variant.patches),
                        expect=variant.expect,
                        repeat=repeat,
                        hosts=spec.hosts,
                        allow=tuple(dict.fromkeys(spec.allow + variant.allow)),
                        point=dict(zip(keys, combo)),
                        workload=workload,
                        fresh_server=spec.fresh_server if variant.fresh_server is None else variant.fresh_server,
                        nodes=spec.nodes if variant.nodes is None else variant.nodes,
                    )
                )
    return plans


def _plan_workload(spec: Spec, variant: Variant, params: dict[str, Any]) -> Workload:
    """The experiment's workload with the variant's fields, then the matrix's and --set's
    `workload.*` keys (taken out of `params`) over it."""
    fields = dict(variant.workload)
    for key in [k for k in params if k.startswith(WORKLOAD_PREFIX)]:
        fields[key[len(WORKLOAD_PREFIX):]] = params.pop(key)
    where = f"{spec.path}: workload of variant '{variant.name}'"
    if not fields:
        return spec.workload
    load = dataclasses.replace(spec.workload, **_workload_fields(fields, where))
    if load.dataset is not None and "num_prompts" in fields:  # a draw the dataset cannot give: refused before any host
        datasets.conversations(load.dataset, load.format, load.num_prompts, load.seed)
    return load


WORKLOAD_FIELDS = {"requests": int, "max_new_tokens": int, "concurrency": int, "temperature": float, "top_p": float,
                   "top_k": int, "num_prompts": int, "seed": int}


def _workload_fields(fields: dict[str, Any], where: str) -> dict[str, Any]:
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


def parse_overrides(items: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`key=value` into params (see `literal`); `env.NAME=value` into env."""
    params: dict[str, Any] = {}
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected key=value, e.g. --set tp_size=8")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes of the command line, kept as surrogates
            shown = item.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise SpecError(f"--set {shown}: not UTF-8 text; give the value in UTF-8") from None
        if key in params or (key.startswith("env.") and key[4:] in env):
            raise SpecError(f"--set {key}= is given twice; keep one")
        if key.startswith("env."):
            name = key[4:]
            if not ENV_NAME.match(name):
                raise SpecError(f"--set {item!r}: {name!r} is not a valid environment variable name")
            env[name] = value
        else:
            params[key] = literal(value)
            if key.startswith(WORKLOAD_PREFIX):
                _workload_fields({key[len(WORKLOAD_PREFIX):]: params[key]}, f"--set {item!r}")
    return params, env


PLAIN_NUMBER = re.compile(r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def literal(value: str) -> Any:
    """A `--set` value as written: an int or float when it is a plain decimal number, a bool for
    true/false, else the text itself. Not YAML: `/m #v2`, `~`, `0x10` and `[a]` stay text."""
    if value in ("true", "false"):
        return value == "true"
    if PLAIN_NUMBER.fullmatch(value):
        return float(value) if any(c in value for c in ".eE") else int(value)
    return value


def resolve_controller_vars(value: str, where: str) -> str:
    """`${NAME}` in an env value comes from the controller's environment (for tokens);
    `$${NAME}` is a literal `${NAME}` (for the shell on the host to expand, or for the server)."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0).startswith("$$"):
            return match.group(0)[1:]
        name = match.group(1)
        if name not in os.environ:
            raise SpecError(f"{where}: ${{{name}}} is not set in this shell; export {name}, "
                            f"write $${{{name}}} for a literal ${{{name}}}, or remove it")
        return os.environ[name]

    return CONTROLLER_VAR.sub(sub, value)


# --- field readers -------------------------------------------------------------------------


def _mapping(data: Located, key: str) -> Located:
    value = data.get(key)
    if value is None:
        return Located(source=data.source, line=data.line_of(key))
    return yamlfile.require_mapping(value, data.where(key), f"`{key}`")


def _names(data: Located, key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{data.where(key)}: `{key}` must be a list of names, e.g. [a, b]")
    return tuple(value)


def _bool(data: Located, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{data.where(key)}: `{key}` must be true or false, got {value!r}")
    return value


def _env_names(data: Located, key: str) -> tuple[str, ...]:
    names = _names(data, key)
    for name in names:
        if not ENV_NAME.match(name):
            raise SpecError(f"{data.where(key)}: {name!r} in `{key}` is not an environment variable name")
    return names


def _env(data: Located, key: str) -> dict[str, str]:
    env = {}
    mapping = _mapping(data, key)
    for name, value in mapping.items():
        if not ENV_NAME.match(name):
            raise SpecError(f"{mapping.where(name)}: {name!r} is not a valid environment variable name")
        if isinstance(value, (dict, list)) or value is None:
            raise SpecError(f"{mapping.where(name)}: env value of {name} must be a string or number")
        env[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def _positive_int(data: Located, key: str, default: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"{data.where(key)}: `{key}` must be a whole number >= 1, got {value!r}")
    return value


def _number(data: Located, key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SpecError(f"{data.where(key)}: `{key}` must be a number, got {value!r}")
    return float(value)


def _positive_number(data: Located, key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{data.where(key)}: `{key}` must be a number > 0, got {value!r}")
    return value


def _patches(data: Located, path: Path) -> dict[str, PatchDef]:
    patches = {}
    mapping = _mapping(data, "patches")
    for name, body in mapping.items():
        where = mapping.where(name)
        identifiers.identifier(name, where, "patch name", "rename the patch")
        body = yamlfile.require_mapping(body, where, f"patch '{name}'")
        yamlfile.check_keys(body, {"file", "find", "count", "diff", *PATCH_ACTIONS}, f"patch '{name}'")
        if not isinstance(body.get("file"), str) or not body["file"]:
            raise SpecError(f"{where}: patch '{name}' needs `file:` (an absolute path or PACKAGE:path)")
        if not body["file"].startswith("/") and ":" not in body["file"]:  # a relative path means nothing on a host
            raise SpecError(f"{body.where('file')}: patch '{name}' `file:` {body['file']!r} is neither an absolute path "
                            "nor PACKAGE:path (a file of a Python package on the host, e.g. mypackage:models/draft.py)")
        if any(ord(c) < 32 for c in body["file"]):
            raise SpecError(f"{body.where('file')}: patch '{name}' `file:` {body['file']!r} holds a control character "
                            "(a newline, a tab, ...); give the path on one line")
        actions = [a for a in PATCH_ACTIONS if a in body]
        if "diff" in body:
            if "find" in body or actions:
                raise SpecError(f"{where}: patch '{name}' has `diff:` and `find:`; use one of them")
            diff_path = path.parent / str(body["diff"])
            if not _is_file(diff_path):
                raise SpecError(f"{body.where('diff')}: diff file {diff_path} not found")
            patches[name] = PatchDef(name, body["file"], where, diff=_diff_text(diff_path, body.where("diff")))
            continue
        if not isinstance(body.get("find"), str) or not body["find"]:
            raise SpecError(f"{where}: patch '{name}' needs `find:` text (or `diff:` a unified diff file)")
        if len(actions) != 1:
            raise SpecError(
                f"{where}: patch '{name}' needs exactly one of replace / insert_after / insert_before"
            )
        text = body[actions[0]]
        if not isinstance(text, str):
            raise SpecError(f"{body.where(actions[0])}: `{actions[0]}` must be text")
        count = _positive_int(body, "count", 1)
        patches[name] = PatchDef(name, body["file"], where, body["find"], actions[0], text, count)
    return patches


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for a name the system cannot look up at all (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _diff_text(path: Path, where: str) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"{where}: diff file {path} is not UTF-8 text; give a unified diff (diff -u)") from None
    except OSError as exc:
        raise SpecError(f"{where}: cannot read diff file {path} ({exc.strerror or exc})") from None


def _variants(data: Located, patches: dict[str, PatchDef], engine: str) -> tuple[Variant, ...]:
    mapping = _mapping(data, "variants")
    if not mapping:
        return (Variant("default", patches=tuple(patches)),)
    variants = []
    for name, body in mapping.items():
        where = mapping.where(name)
        identifiers.identifier(name, where, "variant name", "rename the variant")
        body = body if body is not None else Located(source=data.source, line=mapping.line_of(name))
        yamlfile.require_mapping(body, where, f"variant '{name}'")
        yamlfile.check_keys(body, {"description", "params", "env", "patches", "expect", "preflight", "workload",
                                   "fresh_server", "nodes"}, f"variant '{name}'")
        names = _names(body, "patches")
        for patch in names:
            if patch not in patches:
                known = ", ".join(patches) or "none defined"
                raise SpecError(f"{body.where('patches')}: variant '{name}' uses unknown patch {patch!r}; patches: {known}")
        expect = {k: str(v) for k, v in _mapping(body, "expect").items()}
        for metric, rule in expect.items():
            parse_expectation(rule, body.where("expect"))
        workload = _mapping(body, "workload")
        fresh = _bool(body, "fresh_server", False) if "fresh_server" in body else None
        nodes = _positive_int(body, "nodes", 1) if "nodes" in body else None
        variants.append(
            Variant(name, str(body.get("description", "")), dict(_mapping(body, "params")), _env(body, "env"), names, expect,
                    _allow(body, engine), _workload_fields(dict(workload), body.where("workload")), fresh, nodes)
        )
    return tuple(variants)


def _engine(data: Located) -> str:
    """`engine:` the serving engine the experiment launches (default sglang)."""
    name = data.get("engine", engines.DEFAULT)
    if name not in engines.KNOWN:
        close = difflib.get_close_matches(str(name), engines.KNOWN, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known engines: {', '.join(engines.KNOWN)}"
        raise SpecError(f"{data.where('engine')}: unknown engine {name!r}; {hint}")
    return str(name)


def _allow(data: Located, engine: str) -> tuple[str, ...]:
    """`preflight: {allow: [code, ...]}`: preflight errors the experiment acknowledges; they are still
    reported and stored, but do not stop the run."""
    body = _mapping(data, "preflight")
    yamlfile.check_keys(body, {"allow"}, "`preflight`")
    codes, where = body.get("allow", []), body.where("allow")
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        raise SpecError(f"{where}: `preflight.allow` must be a list of finding codes, e.g. [algorithm-not-eagle3]")
    known = engines.preflight_codes(engine)
    for code in codes:
        if code not in known:
            close = difflib.get_close_matches(code, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known codes: {', '.join(known)}"
            raise SpecError(f"{where}: unknown preflight code {code!r} in `preflight.allow`; {hint}")
    return tuple(codes)


EXPECTATION = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?[0-9.]+)\s*$")


def parse_expectation(rule: str, where: str) -> tuple[str, float]:
    match = EXPECTATION.match(rule)
    if not match:
        raise SpecError(f"{where}: expectation {rule!r} must look like '>= 2.0' (ops: > >= < <= == !=)")
    return match.group(1), float(match.group(2))


def _matrix(data: Located) -> dict[str, tuple[Any, ...]]:
    result = {}
    mapping = _mapping(data, "matrix")
    for key, values in mapping.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"{mapping.where(key)}: matrix {key!r} must be a non-empty list of values")
        if key.startswith(WORKLOAD_PREFIX):
            for value in values:
                _workload_fields({key[len(WORKLOAD_PREFIX):]: value}, f"{mapping.where(key)}: matrix")
        result[key] = tuple(values)
    return result


WORKLOAD_KEYS = {"requests", "max_new_tokens", "concurrency", "temperature", "prompts", "endpoint", "top_p", "top_k",
                 "dataset", "format", "num_prompts", "seed", "tool", "args"}
ENDPOINTS = ("generate", "chat")


def _workload_sweeps(data: Located) -> dict[str, tuple[Any, ...]]:
    """`workload: {concurrency: [1, 4, 16]}`: a list of values for a field that can vary per run is a
    matrix axis `workload.concurrency` (one run per value; with server reuse, all on one server)."""
    body, matrix = _mapping(data, "workload"), _mapping(data, "matrix")
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
            _workload_fields({name: value}, body.where(name))
        sweeps[key] = tuple(values)
    return sweeps


def _workload(data: Located, path: Path) -> Workload:
    given = _mapping(data, "workload")
    yamlfile.check_keys(given, WORKLOAD_KEYS, "workload")
    body = Located({k: v for k, v in given.items() if not (k in WORKLOAD_FIELDS and isinstance(v, list))},
                   source=given.source, line=given.line)  # the lists are matrix axes (_workload_sweeps)
    body.lines = given.lines
    files = {}
    for key in ("prompts", "dataset"):
        if body.get(key) is not None:
            found = path.parent / str(body.get(key))
            if not _is_file(found):
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
    optional = _workload_fields({k: body[k] for k in ("top_p", "top_k", "num_prompts", "seed") if body.get(k) is not None},
                                body.where("workload"))
    if optional.get("top_p", 0.5) > 1:
        raise SpecError(f"{body.where('top_p')}: `top_p` must be at most 1, got {optional['top_p']!r}")
    workload = Workload(
        requests=_positive_int(body, "requests", 8),
        max_new_tokens=_positive_int(body, "max_new_tokens", 64),
        concurrency=_positive_int(body, "concurrency", 4),
        temperature=_number(body, "temperature", 0.0),
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


def _plain(value: Any) -> Any:
    """The spec as plain JSON-able data, for the run record."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


TRANSFORMS = ("rename_keys", "d2t_to_offsets", "d2t_to_absolute")  # d2t_to_absolute makes a fault


def _checkpoints(data: Located, path: Path) -> tuple[CheckpointDef, ...]:
    """`checkpoints:` a list of {name, src (local folder, relative to the experiment), dest, transform}."""
    items = data.get("checkpoints") or []
    if not isinstance(items, list):
        raise SpecError(f"{data.where('checkpoints')}: `checkpoints` must be a list of {{name, src, dest}}")
    found: dict[str, CheckpointDef] = {}
    for item in items:
        body = yamlfile.require_mapping(item, data.where("checkpoints"), "a checkpoint")
        where = body.where()
        yamlfile.check_keys(body, {"name", "src", "dest", "transform"}, "checkpoint")
        name, src, dest = body.get("name"), body.get("src"), body.get("dest")
        if not (isinstance(name, str) and name and isinstance(src, str) and src and isinstance(dest, str) and dest):
            raise SpecError(f"{where}: a checkpoint needs `name`, `src` (a local folder) and `dest` (a host path)")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in found:
            raise SpecError(f"{where}: checkpoint name {name!r} must be a unique identifier (templates use checkpoints.{name})")
        folder = Path(os.path.abspath(path.parent / src))
        if not _is_dir(folder):
            raise SpecError(f"{body.where('src')}: checkpoint '{name}': src {folder} is not a folder")
        found[name] = CheckpointDef(name, folder.resolve(), dest, where, _transforms(body, name))
    return tuple(found.values())


def _transforms(body: Located, name: str) -> tuple[dict[str, Any], ...]:
    items = body.get("transform") or []
    where = body.where("transform")
    if not isinstance(items, list):
        raise SpecError(f"{where}: checkpoint '{name}': `transform` must be a list, e.g. [d2t_to_offsets]")
    result: list[dict[str, Any]] = []
    for item in items:
        kind, value = item, None
        if isinstance(item, dict) and len(item) == 1:
            kind, value = next(iter(item.items()))
        if kind not in TRANSFORMS:
            raise SpecError(f"{where}: checkpoint '{name}': unknown transform {item!r}; known: {', '.join(TRANSFORMS)}")
        if kind == "rename_keys":
            if not isinstance(value, dict) or not value or not all(isinstance(k, str) and k and isinstance(v, str)
                                                                  for k, v in value.items()):
                raise SpecError(f"{where}: checkpoint '{name}': rename_keys needs a prefix map, "
                                f"e.g. {{\"layers.0.\": \"midlayer.\"}}")
            result.append({"rename_keys": {str(k): str(v) for k, v in value.items()}})
        else:
            result.append({kind: True})
    return tuple(result)
