"""EAGLE-3 checkpoint checks that catch, before any GPU is used, what SGLang fails on silently
or at startup.

Pure: takes what was read from the host (config.json files, the draft's tensor names and shapes,
its `d2t`/`t2d`, facts from the installed SGLang's own source) and the launch params and env, and
returns findings. Each finding says how bad (an error stops the run unless the experiment allows
its code), what, why and how to fix it.
"""

from __future__ import annotations

import re

from . import capture, vocab
from .facts import LAYERS, LLAMA_DRAFT, MIDLAYER, Capture, Facts, aux_count, config_value, version_tuple
from orchestrator.engines.finding import ERROR, INFO, WARNING, Finding, acknowledged, blocking, errors  # noqa: F401 (re-exported)
from .source import METHOD as CAPTURE_METHOD
from .vocab import d2t_form
from orchestrator.engines.tokenizers import CODES as TOKENIZER_CODES

__all__ = ["ERROR", "WARNING", "INFO", "MIDLAYER", "LAYERS", "CAPTURE_METHOD", "CODES", "Capture", "Facts", "Finding",
           "acknowledged", "blocking", "check", "d2t_form", "draft_layout", "errors", "version_tuple"]

LAYERS_FROM = (0, 5, 12)  # SGLang 0.5.12 moved the draft layer to `layers.N` and remaps `midlayer`
CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_PART = r"(?:self_attn\.(?:q|k|v|o|qkv)_proj|mlp\.(?:gate|up|down|gate_up)_proj|input_layernorm|hidden_norm|post_attention_layernorm)\.(?:weight|bias)"
MID_KEY = re.compile(rf"^midlayer\.{_PART}$")
LAYER_KEY = re.compile(rf"^layers\.(\d+)\.{_PART}$")
TOP_KEY = re.compile(r"^(?:fc\.(?:weight|bias)|norm\.weight|lm_head\.weight|embed_tokens\.weight|d2t|t2d)$")
NEW_NORM_KEY = re.compile(r"^(?:fc_norm\.\d+\.weight|aux_norm_(?:low|mid|high)\.weight|input_norm\.weight)$")
TRUE_VALUES = ("1", "true", "yes", "y", "on")
CODES = (  # every code a finding can carry; `preflight: {allow: [...]}` names them
    "algorithm-not-eagle3", "aux-capture-disabled", "aux-capture-missing", "aux-capture-patched",
    "checkpoint-path-missing", "config-invalid",
    "d2t-absolute", "d2t-invalid", "d2t-length", "d2t-missing", "draft-arch", "draft-arch-converted",
    "draft-arch-unknown", "draft-context", "draft-keys-dropped", "draft-keys-missing", "draft-keys-unknown",
    "draft-tokens-adjusted", "draft-weights-missing", "draft-weights-unchecked", "fc-missing", "fc-width",
    "lm-head-missing", "lm-head-shape", "not-a-folder", "t2d-inconsistent", "target-class-not-found",
    "target-embed-head-missing", "target-embed-head-patched", *TOKENIZER_CODES,
)


def draft_layout(llama_eagle3_source: str | None, version: str | None) -> str:
    """Which key layout the host's `llama_eagle3.py` loads: read from its source when there is one
    (the rehearsal keeps the `midlayer` layout under a 0.5.23 version string), else from the version."""
    text = llama_eagle3_source or ""
    if "legacy_name_map" in text or re.search(r"self\.layers\s*=\s*nn\.ModuleList", text):
        return LAYERS
    if re.search(r"self\.midlayer\s*=", text):
        return MIDLAYER
    parsed = version_tuple(version)
    return LAYERS if parsed is not None and parsed >= LAYERS_FROM else MIDLAYER


def check(facts: Facts) -> list[Finding]:
    """Every check that applies; an empty list means nothing found."""
    unknown = capture.unregistered(facts)
    if unknown:
        return unknown  # the server cannot load the draft at all: one clear error, not its consequences
    arch = facts.draft_arch
    if "Eagle3" not in arch:
        return [Finding(INFO, "draft-arch", f"draft architecture {arch} at {facts.draft_path}",
                        "the checkpoint checks know EAGLE-3 drafts only", "nothing to do"),
                *capture.embed_head(facts)]  # the target is asked for it whatever the draft
    weights = _weights(facts)
    read = not weights
    keys = _keys(facts) if arch == LLAMA_DRAFT else _layer_present(facts)
    return [*weights, *(keys + _fc(facts) if read else []), *capture.check(facts), *vocab.check(facts, read),
            *_context(facts), *_flags(facts)]


def _weights(facts: Facts) -> list[Finding]:
    """One finding when the draft's weights were not read, instead of every check that needs them."""
    if facts.weights_unread:
        return [Finding(WARNING, "draft-weights-unchecked", f"the draft's weights were not checked: {facts.weights_unread}",
                        "the key, fc and lm_head checks need the tensor names and shapes; SGLang itself may still load them",
                        "save the draft as safetensors to have it checked (or check it by hand)")]
    if not facts.weight_files:
        return [Finding(ERROR, "draft-weights-missing", f"no *.safetensors or *.bin weights in {facts.draft_path}",
                        f"SGLang fails at startup: `RuntimeError: Cannot find any model weights with `{facts.draft_path}``",
                        "point draft_model_path at the folder that holds the draft's weights")]
    return []


def _keys(facts: Facts) -> list[Finding]:
    names = [k.removeprefix("model.") for k in facts.draft_tensors]
    layers = int(facts.draft_config.get("num_hidden_layers") or 1)
    loaded, dropped, unknown = [], [], []
    for name in names:
        layer = LAYER_KEY.match(name)
        if TOP_KEY.match(name):
            continue
        if MID_KEY.match(name):
            loaded.append(name)  # 0.5.12+ remaps `midlayer` to `layers.0`
        elif layer:
            (loaded if facts.layout == LAYERS and int(layer.group(1)) < layers else dropped).append(name)
        elif NEW_NORM_KEY.match(name) and facts.layout == LAYERS:
            continue
        else:
            unknown.append(name)
    found = []
    expects = "midlayer.*" if facts.layout == MIDLAYER else "layers.N.* (or midlayer.*, remapped)"
    host = f"SGLang {facts.sglang_version or '?'} (loads {expects})"
    if dropped:
        severity = ERROR if not loaded else WARNING
        found.append(Finding(
            severity, "draft-keys-dropped",
            f"{len(dropped)} draft weights in {facts.draft_path} are named {_prefix(dropped)}* (e.g. {dropped[0]}); "
            f"{host} silently drops them",
            "load_weights skips keys it does not know, so the draft runs on its random-initialised decoder layer "
            "and almost every draft token is rejected (accept length ~1.0)",
            "add `transform: [{rename_keys: {\"layers.0.\": \"midlayer.\"}}]` to the checkpoint in the experiment, "
            "or save the draft with midlayer.* keys"))
    elif not loaded:
        found.append(Finding(ERROR, "draft-keys-missing", f"no decoder-layer weights in {facts.draft_path}",
                             f"{host}; without them the draft layer stays random (accept length ~1.0)",
                             "point draft_model_path at a complete EAGLE-3 checkpoint"))
    if unknown:
        found.append(Finding(WARNING, "draft-keys-unknown",
                             f"{len(unknown)} draft keys {host} does not load: {', '.join(unknown[:8])}"
                             + (" ..." if len(unknown) > 8 else ""),
                             "SGLang skips unknown keys without a word", "rename or remove them if they matter"))
    if "fc.weight" not in names:
        found.append(Finding(ERROR, "fc-missing", f"no fc.weight in {facts.draft_path}",
                             "the projection of the target's hidden states stays random",
                             "export the draft with its fc layer"))
    return found


def _layer_present(facts: Facts) -> list[Finding]:
    """For EAGLE-3 classes other than llama's (e.g. Eagle3DeepseekV2ForCausalLM, whose loader maps
    `layers.0.*` and `midlayer.*` alike and logs what it skips): the decoder layer and fc are there."""
    names = [k.removeprefix("model.") for k in facts.draft_tensors]
    found = []
    if not any(n.startswith(("layers.0.", "midlayer.")) for n in names):
        found.append(Finding(ERROR, "draft-keys-missing", f"no decoder-layer weights (layers.0.* or midlayer.*) in "
                             f"{facts.draft_path}", "the draft layer stays random (accept length ~1.0)",
                             "point draft_model_path at a complete EAGLE-3 checkpoint"))
    if "fc.weight" not in names:
        found.append(Finding(ERROR, "fc-missing", f"no fc.weight in {facts.draft_path}",
                             "the projection of the target's hidden states stays random", "export the draft with its fc layer"))
    return found


def _prefix(keys: list[str]) -> str:
    return ".".join(keys[0].split(".")[:2]) + "."


def _fc(facts: Facts) -> list[Finding]:
    fc = facts.draft_tensors.get("fc.weight") or facts.draft_tensors.get("model.fc.weight")
    hidden = facts.draft_config.get("target_hidden_size") or config_value(facts.target_config, "hidden_size")
    if fc is None or len(fc.shape) != 2 or not hidden:
        return []
    aux = aux_count(facts)
    want = int(hidden) * aux
    if fc.shape[1] == want:
        return []
    return [Finding(ERROR, "fc-width",
                    f"fc.weight takes {fc.shape[1]} inputs but this target gives {hidden} (hidden size) x {aux} "
                    f"aux layers = {want}",
                    "SGLang builds fc for the target's width; a draft trained for another target or another "
                    "number of aux layers cannot load or projects garbage",
                    "use a draft trained for this target, or set target_hidden_size / "
                    "eagle_config.eagle_aux_hidden_state_layer_ids in the draft's config.json to what it was trained with")]


def _context(facts: Facts) -> list[Finding]:
    default = facts.source.longer_context if facts.source else None
    if default is None:  # the source did not say: 0.4.x allowed the override unless told not to
        parsed = version_tuple(facts.sglang_version)
        default = parsed is not None and parsed < (0, 5, 0)
    draft_len = facts.draft_config.get("max_position_embeddings")
    target_len = facts.params.get("context_length") or config_value(facts.target_config, "max_position_embeddings")
    told = str(facts.env.get(CONTEXT_ENV, "")).strip().lower()
    allowed = told in TRUE_VALUES if told else default
    if not draft_len or not target_len or int(draft_len) >= int(target_len) or allowed:
        return []
    return [Finding(ERROR, "draft-context",
                    f"draft max_position_embeddings {draft_len} is below the target's context length {target_len} "
                    f"and the launch env does not set {CONTEXT_ENV}=1",
                    f"SGLang {facts.sglang_version or '?'} raises `ValueError: ... set the env var "
                    f"{CONTEXT_ENV}=1` while loading the draft and the server dies",
                    f"add `{CONTEXT_ENV}: \"1\"` to the experiment's env (or --set env.{CONTEXT_ENV}=1)")]


def _flags(facts: Facts) -> list[Finding]:
    p = facts.params
    try:
        steps, topk, tokens = (int(p[k]) for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"))
    except (KeyError, TypeError, ValueError):
        return []
    if topk != 1 or tokens == steps + 1:
        return []
    return [Finding(WARNING, "draft-tokens-adjusted",
                    f"--speculative-num-draft-tokens {tokens} with --speculative-eagle-topk 1 and --speculative-num-steps {steps}",
                    f"SGLang rewrites it to num_steps + 1 = {steps + 1} when topk is 1, so the run does not measure what the params say",
                    f"set speculative_num_draft_tokens: {steps + 1}")]
