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

What changed: each run records its fingerprint's parts (`parts`: the template's and each patch's and
checkpoint's digest, the params and env as the fingerprint reads them, the workload), as its
`fingerprint` event; a plan whose fingerprint differs from its latest succeeded run's is told what
differs from that run's parts (`changes`): `speculative_num_steps=3→5`, `template`, `patch NAME`.
Env values and secret-named params are never printed, only their names.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.secrets import MIN_LENGTH, is_secret_name
from orchestrator.core.spec import HOST_SPECIFIC_PARAMS, PatchDef, RunPlan, Spec, Workload

VERSION = 1  # part of every fingerprint: a change of what goes in makes old runs "changed", never equal


def fingerprinted(spec: Spec, plans: list[RunPlan]) -> list[RunPlan]:
    """The plans with their fingerprint, its parts and server key set (the spec-wide parts are read
    once per workload)."""
    digests: dict[str, str] = {}
    launch = _launch_digest(spec)
    read = _launch_parts(spec)
    loads: dict[str, dict[str, Any]] = {}  # a prompts file is hashed once per workload, not per plan
    return [dataclasses.replace(p, fingerprint=fingerprint(spec, p, digests), server_key=server_key(spec, p, launch),
                                fingerprint_parts=parts(spec, p, read, loads)) for p in plans]


def parts(spec: Spec, plan: RunPlan, launch: dict[str, Any] | None = None,
          loads: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the plan's fingerprint is made of, part by part, as plain JSON data (`launch`: the
    spec's `_launch_parts`, `loads`: workloads' parts by workload, both kept across many plans);
    secret-named params masked."""
    launch = launch if launch is not None else _launch_parts(spec)
    load = plan.workload or spec.workload
    key = _workload_key(load)
    loads = {} if loads is None else loads
    if key not in loads:
        loads[key] = _workload_parts(load)
    params, env, patches = _plan_parts(spec, plan)
    data = {
        "version": VERSION, "template": launch["template"],
        "checkpoints": {c[0]: _digest(c[1:]) for c in launch["checkpoints"]},
        "workload": loads[key],
        "params": {k: ("<secret>" if _hidden(k, v, spec.secrets) else v) for k, v in params.items()},
        "env": env, "patches": {p.name: digest for p, digest in zip(plan.patches, patches)},
    }
    return dict(json.loads(json.dumps(data, default=str)))  # as the store gives it back


def _hidden(name: str, value: Any, listed: tuple[str, ...]) -> bool:
    """A param whose value is kept out of the parts: text under a secret name, long enough to be one
    (as `orch import` hides a param; `speculative_num_draft_tokens: 4` is no secret)."""
    return isinstance(value, str) and len(value) >= MIN_LENGTH and is_secret_name(name, listed)


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two runs' fingerprint parts, a few words each: `steps=3→5`, `template`,
    `patch kimi-aux-capture`, `env HF_HOME`, `workload requests=8→16`; values of env and of
    secret-named params never shown."""
    said: list[str] = []
    if old.get("version") != new.get("version"):
        said.append(f"orch's fingerprint version {old.get('version')}→{new.get('version')}")
    if old.get("template") != new.get("template"):
        said.append("template")
    said += _valued("", old.get("params", {}), new.get("params", {}))
    said += [f"env {name}" for name in _differing(old.get("env", {}), new.get("env", {}))]
    for what, noun in (("patches", "patch"), ("checkpoints", "checkpoint")):
        before, after = old.get(what, {}), new.get(what, {})
        said += [f"{noun} {name}" + (" added" if name not in before else " removed" if name not in after else "")
                 for name in _differing(before, after)]
    said += _valued("workload ", old.get("workload", {}), new.get("workload", {}))
    return said


def _differing(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in dict.fromkeys([*before, *after]) if before.get(k, _UNSET) != after.get(k, _UNSET)]


def _valued(prefix: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """`k=old→new` for each key that differs (`-` where unset; a masked secret by its name alone)."""
    said = []
    for key in _differing(before, after):
        old, new = before.get(key, _UNSET), after.get(key, _UNSET)
        if "<secret>" in (old, new) or (key == "prompts" and old is not _UNSET and new is not _UNSET):
            said.append(f"{prefix}{key}")  # a secret, or the prompts file's digest: its name says enough
        else:
            said.append(f"{prefix}{key}={_shown(old)}→{_shown(new)}")
    return said


_UNSET = object()
SHOWN = 40  # characters of a value in a `k=old→new`


def _shown(value: Any) -> str:
    if value is _UNSET:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"


def fingerprint(spec: Spec, plan: RunPlan, digests: dict[str, str] | None = None) -> str:
    """`digests`: the spec-wide digest by workload (as JSON: a workload may hold lists and mappings)."""
    load = plan.workload or spec.workload
    digests = {} if digests is None else digests
    key = _workload_key(load)
    if key not in digests:
        digests[key] = _spec_digest(spec, load)
    return _digest([digests[key], *_plan_parts(spec, plan)])


def server_key(spec: Spec, plan: RunPlan, launch: str | None = None) -> str:
    """What a server is launched from: plans with the same key can share one (see the module doc)."""
    own = plan.key if plan.fresh_server else None
    return _digest([launch or _launch_digest(spec), plan.variant, own, *_plan_parts(spec, plan)])


def _plan_parts(spec: Spec, plan: RunPlan) -> list[Any]:  # as `parts` reads them too
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
    return _digest({**_launch_parts(spec), "workload": _workload_parts(load)})


def _workload_key(load: Workload) -> str:
    """A workload as JSON (it may hold lists and mappings): what the per-workload reads are kept by."""
    return json.dumps(dataclasses.asdict(load), sort_keys=True, default=str)


def _workload_parts(load: Workload) -> dict[str, Any]:
    """The workload as the fingerprint reads it: its fields, its prompts file by content."""
    workload = dataclasses.asdict(load)
    workload["prompts"] = _file_hash(Path(load.prompts)) if load.prompts else None
    return workload


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


def decide(plans: list[RunPlan], succeeded: dict[str, dict[str, int]],
           recorded: Callable[[int], dict[str, Any] | None] = lambda run_id: None) -> list[Decision]:
    """For each plan: skip it when a run of its key with its fingerprint succeeded, else run it.
    `succeeded`: key -> {fingerprint: latest succeeded run id} (Store.succeeded_keys); `recorded`:
    a run's fingerprint parts (None: not recorded), to say what changed since."""
    decisions = []
    for plan in plans:
        found = succeeded.get(plan.key, {})
        if plan.fingerprint in found:
            decisions.append(Decision(plan, False, f"{label(plan)}: skipped, run {found[plan.fingerprint]} succeeded"))
        elif found:
            latest = max(found.values())
            what = _what_changed(recorded(latest), plan, latest)
            decisions.append(Decision(plan, True, f"{label(plan)}: fingerprint changed since run {latest} "
                                                  f"({what}): runs again"))
        else:
            decisions.append(Decision(plan, True, f"{label(plan)}: no succeeded run yet: runs"))
    return decisions


def _what_changed(before: dict[str, Any] | None, plan: RunPlan, run_id: int) -> str:
    if not before or not plan.fingerprint_parts:
        return f"what changed is not known: run {run_id} was recorded before runs kept their fingerprint's parts"
    said = changes(before, plan.fingerprint_parts)
    if said:
        return ", ".join(said)
    hidden = [k for k, v in plan.fingerprint_parts.get("params", {}).items() if v == "<secret>"]
    return "no part it records differs: " + (f"a secret's value may have ({', '.join(hidden)})" if hidden else
                                            "it was made by another orch")


def label(plan: RunPlan) -> str:
    """`fixed (speculative_num_steps=3, repeat 0)`: a plan as a person names it."""
    point = [f"{k}={v}" for k, v in plan.point.items()]
    return f"{plan.variant} ({', '.join([*point, f'repeat {plan.repeat}'])})"
