"""What the EAGLE-3 preflight knows about one run: read from the host (configs, weights, the
installed SGLang's source) and the run's own params, env and patches. Pure data and lookups."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.engines.safetensors import TensorInfo
from .source import HostSource

MIDLAYER, LAYERS = "midlayer", "layers"
LLAMA_DRAFT = "LlamaForCausalLMEagle3"


@dataclass(frozen=True)
class Capture:
    """Whether the target's class has a method the server asks it for: setting the layers whose
    hidden states it hands the draft (`capture`), or handing over its embedding and lm_head (`embed_head`)."""

    architecture: str
    file: str | None  # relative to the sglang package, e.g. srt/models/kimi_k25.py
    implemented: bool | None  # None: the class was not found in the host's srt/models
    patched_by: tuple[str, ...] = ()  # patches of this run that add the method
    refusal: str | None = None  # the error its own method raises when the inner model lacks it
    chain: tuple[str, ...] = ()  # how the answer was found


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
    source: HostSource | None = None
    weights_unread: str | None = None  # why the draft's weights could not be read; None: read (or none found)
    weight_files: int = 1  # how many weight files SGLang would load from the draft folder
    embed_head: Capture | None = None  # the target class's get_embed_and_head; None: not asked

    @property
    def algorithm(self) -> str:
        """The speculative algorithm as SGLang runs it (server_args rewrites NEXTN to EAGLE)."""
        name = str(self.params.get("speculative_algorithm") or "").upper()
        return "EAGLE" if name == "NEXTN" else name

    @property
    def draft_arch(self) -> str:
        """The architecture SGLang loads the draft as: the first of its list the host registers."""
        names = [str(a) for a in self.draft_config.get("architectures") or []] or ["?"]
        registered = self.source.registry if self.source else {}
        return next((a for a in names if a in registered), names[0])


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in found.groups()) if found else None


def config_value(config: dict[str, Any], key: str) -> Any:
    """A config value, looking inside `text_config` for multimodal targets (Kimi-K2.5)."""
    if key in config:
        return config[key]
    inner = config.get("text_config")
    return inner.get(key) if isinstance(inner, dict) else None


def aux_count(facts: Facts) -> int:
    """How many target layers' hidden states the draft's fc takes, as the host's loader builds it."""
    if facts.draft_arch == LLAMA_DRAFT and facts.layout == MIDLAYER:
        return 3  # SGLang <= 0.5.11 builds llama_eagle3's fc as hidden_size_in * 3
    cfg = facts.draft_config
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    declared = cfg.get("num_aux_hidden_states") if facts.draft_arch == LLAMA_DRAFT else None  # only llama_eagle3 reads it
    return int(declared or (len(ids) if ids else 3))


def uses_aux(facts: Facts) -> bool:
    """The draft config's `eagle_config.use_aux_hidden_state` (default true)."""
    eagle = facts.draft_config.get("eagle_config")
    return bool(eagle.get("use_aux_hidden_state", True)) if isinstance(eagle, dict) else True
