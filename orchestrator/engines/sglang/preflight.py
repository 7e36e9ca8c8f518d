"""EAGLE-3 checkpoint checks that catch, before any GPU is used, what SGLang fails on silently.

Pure: takes what was read from the host (config.json files, safetensors headers, the `d2t`/`t2d`
tensors, the SGLang version and source facts, the launch params and env) and returns findings.
Each finding says how bad (an error stops the run), what, why and how to fix it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .safetensors import TensorInfo

ERROR, WARNING, INFO = "error", "warning", "info"
MIDLAYER, LAYERS = "midlayer", "layers"
LAYERS_FROM = (0, 5, 12)  # SGLang 0.5.12 moved the draft layer to `layers.N` and remaps `midlayer`
CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
CAPTURE_METHOD = "set_eagle3_layers_to_capture"
DRAFT_ARCHS = ("LlamaForCausalLMEagle3",)
_PART = r"(?:self_attn\.(?:q|k|v|o|qkv)_proj|mlp\.(?:gate|up|down|gate_up)_proj|input_layernorm|hidden_norm|post_attention_layernorm)\.(?:weight|bias)"
MID_KEY = re.compile(rf"^midlayer\.{_PART}$")
LAYER_KEY = re.compile(rf"^layers\.(\d+)\.{_PART}$")
TOP_KEY = re.compile(r"^(?:fc\.(?:weight|bias)|norm\.weight|lm_head\.weight|embed_tokens\.weight|d2t|t2d)$")
NEW_NORM_KEY = re.compile(r"^(?:fc_norm\.\d+\.weight|aux_norm_(?:low|mid|high)\.weight|input_norm\.weight)$")
TRUE_VALUES = ("1", "true", "yes", "y", "on")


@dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    what: str
    why: str
    fix: str

    def as_json(self) -> dict[str, str]:
        return {"severity": self.severity, "code": self.code, "what": self.what, "why": self.why, "fix": self.fix}


@dataclass(frozen=True)
class Capture:
    """Whether the target's model class (or a base class) defines the aux-capture method."""

    architecture: str
    file: str | None  # relative to the sglang package, e.g. srt/models/kimi_k25.py
    implemented: bool | None  # None: the class was not found in the host's srt/models
    patched_by: tuple[str, ...] = ()  # patches of this run that add the method to that file


@dataclass(frozen=True)
class Facts:
    sglang_version: str | None
    layout: str
    target_path: str
    target_config: dict[str, Any]
    draft_path: str
    draft_config: dict[str, Any]
    draft_tensors: dict[str, TensorInfo]
    d2t: np.ndarray | None = None
    t2d: np.ndarray | None = None
    capture: Capture | None = None
    params: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in found.groups()) if found else None


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


def class_facts(source: str, name: str) -> tuple[bool, bool, tuple[str, ...]]:
    """(class found, defines CAPTURE_METHOD itself, base class names) from one file's text."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False, False, ()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            bases = tuple(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                          if isinstance(b, (ast.Name, ast.Attribute)))
            return True, CAPTURE_METHOD in methods, bases
    return False, False, ()


def check(facts: Facts) -> list[Finding]:
    """Every check that applies; an empty list means nothing found."""
    arch = (facts.draft_config.get("architectures") or ["?"])[0]
    if arch not in DRAFT_ARCHS:
        return [Finding(INFO, "draft-arch", f"draft architecture {arch} at {facts.draft_path}",
                        "the checkpoint checks know the Llama-style EAGLE-3 draft only", "nothing to do")]
    return [*_keys(facts), *_fc(facts), *_capture(facts), *_vocab(facts), *_context(facts), *_flags(facts)]


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]


def _cfg(config: dict[str, Any], key: str) -> Any:
    """A config value, looking inside `text_config` for multimodal targets (Kimi-K2.5)."""
    if key in config:
        return config[key]
    inner = config.get("text_config")
    return inner.get(key) if isinstance(inner, dict) else None


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


def _prefix(keys: list[str]) -> str:
    return ".".join(keys[0].split(".")[:2]) + "."


def _aux_count(facts: Facts) -> int:
    if facts.layout == MIDLAYER:
        return 3  # SGLang <= 0.5.11 builds fc as hidden_size_in * 3
    cfg = facts.draft_config
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return int(cfg.get("num_aux_hidden_states") or (len(ids) if ids else 3))


def _fc(facts: Facts) -> list[Finding]:
    fc = facts.draft_tensors.get("fc.weight") or facts.draft_tensors.get("model.fc.weight")
    hidden = facts.draft_config.get("target_hidden_size") or _cfg(facts.target_config, "hidden_size")
    if fc is None or len(fc.shape) != 2 or not hidden:
        return []
    aux = _aux_count(facts)
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


def _capture(facts: Facts) -> list[Finding]:
    capture = facts.capture
    use_aux = (facts.draft_config.get("eagle_config") or {}).get("use_aux_hidden_state", True)
    if capture is None or not use_aux or capture.implemented:
        return []
    if capture.implemented is None:
        return [Finding(WARNING, "target-class-not-found",
                        f"target architecture {capture.architecture} was not found in the host's sglang/srt/models",
                        "whether it captures aux hidden states for EAGLE-3 cannot be checked",
                        "check the target's config.json `architectures`")]
    hidden = _cfg(facts.target_config, "hidden_size") or "H"
    what = (f"target class {capture.architecture} ({capture.file}) does not implement {CAPTURE_METHOD}; "
            f"hidden states will be one layer wide ({hidden}) instead of {_aux_count(facts)} x {hidden}, and the "
            f"draft's fc projection will be skipped")
    if capture.patched_by:
        return [Finding(INFO, "aux-capture-patched",
                        f"target class {capture.architecture} ({capture.file}) lacks {CAPTURE_METHOD} as installed",
                        f"patch {', '.join(capture.patched_by)} of this run adds it before the launch",
                        "nothing to do")]
    return [Finding(WARNING, "aux-capture-missing", what,
                    "SGLang's model runner then passes the last layer's hidden state alone and the draft's "
                    "`shape[-1] != embeds.shape[-1]` gate skips fc: almost every draft token is rejected (accept length ~1.0)",
                    f"add {CAPTURE_METHOD} to the class with a patch (see kimi-aux-capture in "
                    f"experiments/eagle_debug.yaml) or use an SGLang version whose {capture.file} has it")]


def d2t_form(d2t: np.ndarray, target_vocab: int, t2d: np.ndarray | None) -> str:
    """'offsets' (d2t[i] + i = target id), 'absolute' (d2t[i] = target id), or 'invalid'."""
    d2t = np.asarray(d2t, dtype=np.int64)
    index = np.arange(len(d2t))
    as_offsets, as_absolute = d2t + index, d2t

    def valid(ids: np.ndarray) -> bool:
        return bool(len(ids)) and bool(np.all(np.diff(ids) > 0)) and ids[0] >= 0 and ids[-1] < target_vocab

    if t2d is not None and len(t2d) == target_vocab:
        hot = np.flatnonzero(np.asarray(t2d))
        if len(hot) == len(d2t):
            if np.array_equal(hot, as_offsets):
                return "offsets"
            if np.array_equal(hot, as_absolute):
                return "absolute"
    if valid(as_offsets) and not (valid(as_absolute) and np.all(np.diff(d2t) > 0) and len(d2t) > 16):
        return "offsets"  # offsets repeat a value wherever two kept ids are adjacent, absolute ids never do
    return "absolute" if valid(as_absolute) else "invalid"


def _vocab(facts: Facts) -> list[Finding]:
    found = []
    target_vocab = _cfg(facts.target_config, "vocab_size")
    draft_vocab = facts.draft_config.get("draft_vocab_size") or facts.draft_config.get("vocab_size")
    names = {k.removeprefix("model.") for k in facts.draft_tensors}
    if target_vocab and draft_vocab and int(draft_vocab) != int(target_vocab):
        head = facts.draft_tensors.get("lm_head.weight")
        if head is None:
            found.append(Finding(ERROR, "lm-head-missing",
                                 f"no lm_head.weight in {facts.draft_path} while its vocabulary ({draft_vocab}) differs "
                                 f"from the target's ({target_vocab})",
                                 "the draft's head cannot come from the target, so it stays random",
                                 "export the draft with its lm_head"))
        elif head.shape[0] != int(draft_vocab):
            found.append(Finding(ERROR, "lm-head-shape", f"lm_head.weight has {head.shape[0]} rows, draft_vocab_size is {draft_vocab}",
                                 "logits would not line up with d2t", "fix draft_vocab_size in config.json"))
        if "d2t" not in names:
            found.append(Finding(ERROR, "d2t-missing", f"no d2t in {facts.draft_path} while the vocabularies differ",
                                 "draft token ids cannot be mapped to target ids", "export the draft with d2t/t2d"))
    if facts.d2t is not None and target_vocab:
        found.extend(_d2t(facts, int(target_vocab), draft_vocab))
    return found


def _d2t(facts: Facts, target_vocab: int, draft_vocab: Any) -> list[Finding]:
    d2t = np.asarray(facts.d2t, dtype=np.int64)
    found = []
    if draft_vocab and len(d2t) != int(draft_vocab):
        found.append(Finding(ERROR, "d2t-length", f"d2t has {len(d2t)} entries, draft_vocab_size is {draft_vocab}",
                             "every draft id needs one", "fix draft_vocab_size or re-export d2t"))
    form = d2t_form(d2t, target_vocab, facts.t2d)
    if form == "absolute":
        found.append(Finding(ERROR, "d2t-absolute",
                             f"d2t in {facts.draft_path} holds absolute target ids (e.g. d2t[1] = {d2t[1] if len(d2t) > 1 else d2t[0]}), not offsets",
                             "SGLang computes hot_token_id = d2t + arange, so every draft id maps to a wrong target "
                             "id and almost every draft token is rejected (accept length ~1.0)",
                             "add `transform: [d2t_to_offsets]` to the checkpoint in the experiment"))
    elif form == "invalid":
        found.append(Finding(ERROR, "d2t-invalid", "d2t + arange is not strictly increasing inside the target vocabulary "
                             f"({target_vocab})", "draft ids would map to wrong or out-of-range target ids",
                             "re-export the vocabulary mapping"))
    if form == "offsets" and facts.t2d is not None:
        hot = np.flatnonzero(np.asarray(facts.t2d))
        if len(facts.t2d) != target_vocab or not np.array_equal(hot, d2t + np.arange(len(d2t))):
            found.append(Finding(WARNING, "t2d-inconsistent", "t2d does not mark exactly the target ids d2t maps to",
                                 "SGLang ignores t2d, but the pair disagreeing means the mapping was exported wrong",
                                 "re-export d2t and t2d together"))
    return found


def _context(facts: Facts) -> list[Finding]:
    parsed = version_tuple(facts.sglang_version)
    if parsed is not None and parsed < (0, 5, 0):
        return []  # 0.4.x allowed the override by default
    draft_len = facts.draft_config.get("max_position_embeddings")
    target_len = facts.params.get("context_length") or _cfg(facts.target_config, "max_position_embeddings")
    allowed = str(facts.env.get(CONTEXT_ENV, "")).strip().lower() in TRUE_VALUES
    if not draft_len or not target_len or int(draft_len) >= int(target_len) or allowed:
        return []
    return [Finding(ERROR, "draft-context",
                    f"draft max_position_embeddings {draft_len} is below the target's context length {target_len} "
                    f"and the launch env does not set {CONTEXT_ENV}=1",
                    "SGLang 0.5.x raises `ValueError: ... set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1` "
                    "while loading the draft and the server dies",
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
