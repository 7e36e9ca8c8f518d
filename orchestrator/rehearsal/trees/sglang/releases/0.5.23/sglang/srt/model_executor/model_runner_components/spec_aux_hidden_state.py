"""Whether the target captures aux hidden states for the draft (SGLang 0.5.23, rehearsal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang.srt.configs.model_config import ModelConfig


@dataclass
class SpecAuxHiddenStateConfig:
    eagle_use_aux_hidden_state: bool = False
    eagle_aux_hidden_state_layer_ids: Any = None


def resolve_spec_aux_hidden_state_config(*, server_args, model_config, spec_algorithm, is_draft_worker: bool) -> SpecAuxHiddenStateConfig:
    config = SpecAuxHiddenStateConfig()
    _resolve_eagle_aux_hidden_state(config=config, server_args=server_args, spec_algorithm=spec_algorithm, is_draft_worker=is_draft_worker)
    return config


def _resolve_eagle_aux_hidden_state(*, config: SpecAuxHiddenStateConfig, server_args, spec_algorithm, is_draft_worker: bool) -> None:
    if not (spec_algorithm.is_eagle() and not is_draft_worker):
        return

    # The draft read in draft mode.
    draft_model_config = ModelConfig(server_args.speculative_draft_model_path, is_draft_model=True)

    if spec_algorithm.is_eagle3():
        config.eagle_use_aux_hidden_state = True
        try:
            eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)
            config.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
            config.eagle_aux_hidden_state_layer_ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
        except Exception:
            config.eagle_aux_hidden_state_layer_ids = None
