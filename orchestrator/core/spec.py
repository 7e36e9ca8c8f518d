"""Experiment files -> frozen, validated specs (the loader); the records, the plan expansion and the
field readers live by subject in experiment, plan, workloads, patchdefs, checkpointdefs and readers,
and are named here too (`spec.RunPlan`, `from orchestrator.core.spec import PatchDef`)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from . import checkpointdefs, names as identifiers, objective as objectives, patchdefs, readers, render, workloads, yamlfile
from .checkpointdefs import TRANSFORMS as TRANSFORMS, CheckpointDef as CheckpointDef
from .defaults import (DEFAULT_DEBUG_PATTERN as DEFAULT_DEBUG_PATTERN, HOST_SPECIFIC_PARAMS as HOST_SPECIFIC_PARAMS,
                       PATCHED_SITE as PATCHED_SITE)  # named as spec.* too
from .experiment import Spec as Spec, Variant as Variant
from .patchdefs import PATCH_ACTIONS as PATCH_ACTIONS, PatchDef as PatchDef
from .plan import PLAIN_NUMBER as PLAIN_NUMBER, RunPlan as RunPlan, expand as expand, literal as literal
from .plan import DEFAULT_PORT as DEFAULT_PORT, parse_overrides as parse_overrides, port_of as port_of
from .plan import tp_size_of as tp_size_of
from .readers import ENV_NAME as ENV_NAME
from .workloads import (ENDPOINTS as ENDPOINTS, WORKLOAD_FIELDS as WORKLOAD_FIELDS, WORKLOAD_KEYS as WORKLOAD_KEYS,
                        WORKLOAD_PREFIX as WORKLOAD_PREFIX, Workload as Workload)
from orchestrator.engines import registry as engines
from orchestrator.errors import SpecError
from .yamlfile import Located

CONTROLLER_VAR = re.compile(r"\$?\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # `$${NAME}` matched too: the escape

TOP_KEYS = {
    "name", "description", "hosts", "template", "params", "env", "patches", "variants",
    "matrix", "repeats", "workload", "debug_pattern", "ready_timeout", "checkpoints", "preflight", "extra_params",
    "secrets", "engine", "fresh_server", "nodes", "objective", render.FOLDERS_KEY,
}


def load(path: Path) -> Spec:
    """Load and validate an experiment file."""
    data = yamlfile.load(path)
    yamlfile.check_keys(data, TOP_KEYS, "the experiment")
    patches = patchdefs.read(data, path)
    engine = _engine(data)
    variants = _variants(data, patches, engine)
    template = Path(os.path.normpath(path.parent / str(data.get("template", f"../templates/{engines.KNOWN[engine].template}"))))
    if not readers.is_file(template):
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
        hosts=readers.names(data, "hosts"),
        template=template,
        engine=engine,
        fresh_server=readers.boolean(data, "fresh_server", False),
        nodes=readers.positive_int(data, "nodes", 1),
        params=dict(readers.mapping(data, "params")),
        env=readers.env(data, "env"),
        patches=patches,
        variants=variants,
        matrix=_matrix(data) | workloads.sweeps(data),
        repeats=readers.positive_int(data, "repeats", 1),
        workload=workloads.read(data, path),
        debug_pattern=debug_pattern,
        ready_timeout=float(readers.positive_number(data, "ready_timeout", 600)),
        raw=_plain(data),
        checkpoints=checkpointdefs.read(data, path),
        allow=_allow(data, engine),
        extra_params=readers.names(data, "extra_params"),
        secrets=readers.env_names(data, "secrets"),
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



def _variants(data: Located, patches: dict[str, PatchDef], engine: str) -> tuple[Variant, ...]:
    mapping = readers.mapping(data, "variants")
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
        names = readers.names(body, "patches")
        for patch in names:
            if patch not in patches:
                known = ", ".join(patches) or "none defined"
                raise SpecError(f"{body.where('patches')}: variant '{name}' uses unknown patch {patch!r}; patches: {known}")
        expect = {k: str(v) for k, v in readers.mapping(body, "expect").items()}
        for rule in expect.values():
            parse_expectation(rule, body.where("expect"))
        workload = readers.mapping(body, "workload")
        fresh = readers.boolean(body, "fresh_server", False) if "fresh_server" in body else None
        nodes = readers.positive_int(body, "nodes", 1) if "nodes" in body else None
        variants.append(
            Variant(name, str(body.get("description", "")), dict(readers.mapping(body, "params")), readers.env(body, "env"), names, expect,
                    _allow(body, engine), workloads.check_fields(dict(workload), body.where("workload")), fresh, nodes)
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
    body = readers.mapping(data, "preflight")
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
    mapping = readers.mapping(data, "matrix")
    for key, values in mapping.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"{mapping.where(key)}: matrix {key!r} must be a non-empty list of values")
        if key.startswith(WORKLOAD_PREFIX):
            for value in values:
                workloads.check_fields({key[len(WORKLOAD_PREFIX):]: value}, f"{mapping.where(key)}: matrix")
        result[key] = tuple(values)
    return result



def _plain(value: Any) -> Any:
    """The spec as plain JSON-able data, for the run record."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
