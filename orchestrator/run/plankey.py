"""What `orch run --resume` knows of a plan: its key and its fingerprint, and the resume decision.

A plan's key (`RunPlan.key`) names it across invocations: experiment, variant, matrix point and
repeat index. Its fingerprint is a SHA-256 of what defines the run, the same whichever host runs it
(the host is only chosen once the run starts, so the fingerprint cannot depend on it):

- the launch command's inputs: the template's text and the params as written, so `{{ host.* }}`
  stays a reference and not a host's value; params naming a host-specific value (`port`, the slot's `gpus`) are left out;
- the experiment's env as written, secret values masked (`${NAME}` stays the reference);
- each patch's target file, find text, action, text, count, and a diff patch's whole text;
- each checkpoint's name, dest (as written), transforms and source manifest hash (push's cache makes
  it a stat of each file once the checkpoint has been pushed; an unreadable source counts as such);
- the plan's workload (requests, tokens, concurrency, temperature, and the prompts file's hash).

A plan's server key (`server_key`) is the same digest without the workload and the repeat: plans
with one key differ only in what is sent to the server, so one server can serve them in turn (server
reuse, `serving.py`). The variant is part of it (a template may read `{{ variant }}`); a plan with
`fresh_server: true` has a key of its own.

Not in it: the host's env and engine version (known only once a host is connected), `expect:` and
the preflight's `allow:` (they judge a run, they do not change it).

Planning reads only (key, fingerprint, id) of the experiment's succeeded runs; runs recorded before
runs carried a key do not count.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.secrets import is_secret_name
from orchestrator.core.spec import HOST_SPECIFIC_PARAMS, PatchDef, RunPlan, Spec, Workload

VERSION = 1  # part of every fingerprint: a change of what goes in makes old runs "changed", never equal


def fingerprinted(spec: Spec, plans: list[RunPlan]) -> list[RunPlan]:
    """The plans with their fingerprint and server key set (the spec-wide parts are read once per workload)."""
    digests: dict[str, str] = {}
    launch = _launch_digest(spec)
    return [dataclasses.replace(p, fingerprint=fingerprint(spec, p, digests), server_key=server_key(spec, p, launch))
            for p in plans]


def fingerprint(spec: Spec, plan: RunPlan, digests: dict[str, str] | None = None) -> str:
    """`digests`: the spec-wide digest by workload (as JSON: a workload may hold lists and mappings)."""
    load = plan.workload or spec.workload
    digests = {} if digests is None else digests
    key = json.dumps(dataclasses.asdict(load), sort_keys=True, default=str)
    if key not in digests:
        digests[key] = _spec_digest(spec, load)
    return _digest([digests[key], *_plan_parts(spec, plan)])


def server_key(spec: Spec, plan: RunPlan, launch: str | None = None) -> str:
    """What a server is launched from: plans with the same key can share one (see the module doc)."""
    own = plan.key if plan.fresh_server else None
    return _digest([launch or _launch_digest(spec), plan.variant, own, *_plan_parts(spec, plan)])


def _plan_parts(spec: Spec, plan: RunPlan) -> list[Any]:
    return [
        {k: v for k, v in plan.params.items() if k not in HOST_SPECIFIC_PARAMS},
        {k: ("<secret>" if is_secret_name(k, spec.secrets) else v) for k, v in plan.env.items()},
        [_patch_digest(p) for p in plan.patches],
    ]


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


@functools.lru_cache(maxsize=1024)  # a patch is hashed once however many plans use it (a PatchDef is its contents)
def _patch_digest(patch: PatchDef) -> str:
    return _digest([patch.file, patch.find, patch.action, patch.text, patch.count, patch.diff])


def _spec_digest(spec: Spec, load: Workload) -> str:
    workload = dataclasses.asdict(load)
    workload["prompts"] = _file_hash(Path(load.prompts)) if load.prompts else None
    return _digest({**_launch_parts(spec), "workload": workload})


def _launch_digest(spec: Spec) -> str:
    return _digest({**_launch_parts(spec), "engine": spec.engine})


def _launch_parts(spec: Spec) -> dict[str, Any]:
    return {
        "version": VERSION,
        "template": _file_hash(spec.template),
        "checkpoints": [[c.name, c.dest, list(c.transforms), _source_hash(c.src)] for c in spec.checkpoints],
    }


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return f"unreadable:{path}"


def _source_hash(src: Path) -> str:
    from orchestrator.host import push  # heavy-ish; only experiments with checkpoints need it

    try:
        return push.local_manifest(src).digest
    except OSError:
        return f"unreadable:{src}"


@dataclass(frozen=True)
class Decision:
    plan: RunPlan
    runs: bool
    line: str  # what `--resume` prints for this plan


def decide(plans: list[RunPlan], succeeded: dict[str, dict[str, int]]) -> list[Decision]:
    """For each plan: skip it when a run of its key with its fingerprint succeeded, else run it.
    `succeeded`: key -> {fingerprint: latest succeeded run id} (Store.succeeded_keys)."""
    decisions = []
    for plan in plans:
        found = succeeded.get(plan.key, {})
        if plan.fingerprint in found:
            decisions.append(Decision(plan, False, f"{label(plan)}: skipped, run {found[plan.fingerprint]} succeeded"))
        elif found:
            latest = max(found.values())
            decisions.append(Decision(plan, True, f"{label(plan)}: fingerprint changed since run {latest}: runs again"))
        else:
            decisions.append(Decision(plan, True, f"{label(plan)}: no succeeded run yet: runs"))
    return decisions


def label(plan: RunPlan) -> str:
    """`fixed (speculative_num_steps=3, repeat 0)`: a plan as a person names it."""
    point = [f"{k}={v}" for k, v in plan.point.items()]
    return f"{plan.variant} ({', '.join([*point, f'repeat {plan.repeat}'])})"
