"""An experiment file as orch holds it once read and checked: the Spec and its Variants."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.engines import registry as engines

from . import objective as objectives
from .checkpointdefs import CheckpointDef
from .patchdefs import PatchDef
from .workloads import Workload


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
    checkpoints: tuple[CheckpointDef, ...] = ()
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
