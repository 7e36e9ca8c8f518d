"""Variants x matrix x repeats -> run plans, with `--set` overrides applied last."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import SpecError

from . import datasets, readers, workloads
from .experiment import Spec, Variant
from .patchdefs import PatchDef
from .workloads import WORKLOAD_PREFIX, Workload


DEFAULT_PORT = 30000  # where a plan without a `port` param serves


def tp_size_of(params: Mapping[str, Any]) -> int:
    """The tensor-parallel size params ask for (1 when unset or empty): the one reading of `tp_size`
    (a whole number: plancheck saw to it)."""
    return int(params.get("tp_size", 1) or 1)


def port_of(params: Mapping[str, Any]) -> int:
    """The port params ask for: the one reading of `port`."""
    return int(params.get("port", DEFAULT_PORT))


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
    fingerprint_parts: dict[str, Any] = field(default_factory=dict)  # what it is made of, by part (plankey.parts)
    workload: Workload | None = None  # the plan's workload (variant, matrix `workload.*`, --set); None: the experiment's
    fresh_server: bool = False  # launch a server of its own even when another plan's could serve it
    server_key: str = ""  # plans with the same key can use one server in turn (plankey.server_key)
    nodes: int = 1  # hosts the run spans (run/multinode.py); > 1: a fresh server, never reused

    @property
    def tp_size(self) -> int:
        return tp_size_of(self.params)

    @property
    def key(self) -> str:
        """The plan's stable name across invocations: experiment, variant, matrix point, repeat index
        (what `--resume` looks up; see plankey)."""
        return json.dumps([self.experiment, self.variant, self.point, self.repeat], sort_keys=True,
                          separators=(",", ":"), default=str)


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
    load = dataclasses.replace(spec.workload, **workloads.check_fields(fields, where))
    if load.dataset is not None and "num_prompts" in fields:  # a draw the dataset cannot give: refused before any host
        datasets.conversations(load.dataset, load.format, load.num_prompts, load.seed)
    return load


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
            if not readers.ENV_NAME.match(name):
                raise SpecError(f"--set {item!r}: {name!r} is not a valid environment variable name")
            env[name] = value
        else:
            params[key] = literal(value)
            if key.startswith(WORKLOAD_PREFIX):
                workloads.check_fields({key[len(WORKLOAD_PREFIX):]: params[key]}, f"--set {item!r}")
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
