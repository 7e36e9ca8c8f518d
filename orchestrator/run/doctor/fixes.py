"""The fix of each cause in orch's terms: a param, a patch, or a checkpoint transform, as a variant
the doctor runs to confirm it. A cause that no change of orch's can fix (a draft trained for another
target) gets its advice and no variant."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core.spec import CheckpointDef, PatchDef
from orchestrator.engines.probe import Probes

from .causes import Decision
from .evidence import Evidence

DRAFT_PARAM = "draft_model_path"
CHECKPOINT_REF = re.compile(r"^\{\{\s*checkpoints\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


@dataclass(frozen=True)
class Fix:
    """What to change, said in orch's terms, and the changes the confirming run makes."""

    says: str
    params: dict[str, Any] = field(default_factory=dict)
    patches: tuple[PatchDef, ...] = ()
    checkpoints: tuple[CheckpointDef, ...] = ()
    runnable: bool = True

    def as_json(self) -> dict[str, Any]:
        return {"says": self.says, "params": self.params, "patches": [p.name for p in self.patches],
                "checkpoints": [{"name": c.name, "transforms": list(c.transforms)} for c in self.checkpoints],
                "runnable": self.runnable}


def advice(says: str) -> Fix:
    return Fix(says, runnable=False)


def for_cause(decision: Decision, evidence: Evidence, engine: Probes, checkpoints: tuple[CheckpointDef, ...],
              written: object, draft_path: str | None, local_host: bool) -> Fix | None:
    """The fix of `decision`'s cause (None when nothing is wrong). `written`: the draft param as the
    experiment writes it (a checkpoint reference or a path), `draft_path`: as the run rendered it."""
    cause = decision.cause
    if cause == "none":
        return None
    if cause == "algorithm-not-eagle3":
        name, value = engine.algorithm_param, engine.eagle3_value
        return Fix(f"launch the EAGLE-3 draft with {value} (params: `{name}: {value}`)", {name: value})
    if cause == "d2t-absolute":
        return _transformed({"d2t_to_offsets": True}, "d2t_to_offsets", checkpoints, written, draft_path, local_host)
    if cause == "draft-keys-dropped":
        renames = rename_map(evidence)
        if not renames:
            return advice("rename the draft's layer keys to the names this engine's loader places")
        return _transformed({"rename_keys": renames}, f"rename_keys {renames}", checkpoints, written, draft_path,
                            local_host)
    if cause in ("aux-layers-mismatch", "fc-width"):
        return advice("the draft does not fit this target: serve it with the target it was trained for, or train "
                      "it on this target's hidden states and layers (its fc and eagle_aux_hidden_state_layer_ids)")
    if cause == "vocab-mismatch":
        return advice("serve the draft with the target (and tokenizer) it was trained for, or train it on this "
                      "target's vocabulary")
    if cause == "aux-capture-off":
        return advice("remove `use_aux_hidden_state: false` from the draft's eagle_config (or set it true)")
    if cause == "aux-capture-missing":
        return advice("add the aux-capture method to the target class with a patch of the run, or use a release "
                      "that has it")
    return advice("read the evidence lines: no fix in orch's terms is known for this cause")


def rename_map(evidence: Evidence) -> dict[str, str]:
    """`layers.0.` -> `midlayer.` (or back): the checkpoint's layer prefix onto the one the loader's
    untouched parameters carry."""
    untouched = [n.removeprefix("model.") for n in evidence.listed("draft-keys", "untouched")]
    wanted = {n.split(".")[0] + "." for n in untouched if n.startswith("midlayer.")}
    wanted |= {".".join(n.split(".")[:2]) + "." for n in untouched if n.startswith("layers.")}
    held = set(evidence.listed("draft-keys", "prefixes"))
    layer_prefixes = [p for p in held if p.startswith(("layers.", "midlayer."))]
    if len(wanted) != 1 or len(layer_prefixes) != 1 or wanted == set(layer_prefixes):
        return {}
    return {layer_prefixes[0]: next(iter(wanted))}


def _transformed(transform: dict[str, Any], named: str, checkpoints: tuple[CheckpointDef, ...], written: object,
                 draft_path: str | None, local_host: bool) -> Fix:
    """The draft as a checkpoint of the run with `transform` added: the experiment's own checkpoint
    when the draft param names one, else the draft's folder where this machine can read it."""
    ref = CHECKPOINT_REF.match(str(written or ""))
    source = next((c for c in checkpoints if ref and c.name == ref[1]), None)
    if source is not None:
        made = CheckpointDef("doctor_draft", source.src, source.dest.rstrip("/") + "-doctor-fix", "orch doctor fix",
                             _added(source.transforms, transform))
    elif local_host and draft_path and Path(draft_path).is_dir():
        made = CheckpointDef("doctor_draft", Path(draft_path).resolve(),
                             "{{ host.workdir }}/checkpoints/doctor/" + Path(draft_path).name + "-fixed",
                             "orch doctor fix", (transform,))
    else:
        return advice(f"add the draft as a checkpoint of the experiment with `transform: [{named}]` "
                      f"(its folder {draft_path} is not on this machine)")
    says = f"serve the draft through a checkpoint with `transform: [{named}]`"
    if source is not None and len(made.transforms) < len(source.transforms):
        dropped = [t for t in source.transforms if t not in made.transforms]
        says = f"serve checkpoint {source.name} without its transform {dropped[0]} ({named} undoes it)"
    return Fix(says, {DRAFT_PARAM: "{{ checkpoints.doctor_draft }}"}, checkpoints=(made,))


def _added(transforms: tuple[dict[str, Any], ...], transform: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """`transform` after the checkpoint's own, or, where one of them is its inverse (a fault made with
    orch's own transform, `d2t_to_absolute`), without that one: each transform reads the source."""
    inverse = _INVERSES.get(next(iter(transform)))
    if inverse is not None and inverse in transforms:
        return tuple(t for t in transforms if t != inverse)
    if "rename_keys" in transform:
        back = {"rename_keys": {new: old for old, new in transform["rename_keys"].items()}}
        if back in transforms:
            return tuple(t for t in transforms if t != back)
    return transforms + (transform,)


_INVERSES = {"d2t_to_offsets": {"d2t_to_absolute": True}, "d2t_to_absolute": {"d2t_to_offsets": True}}
