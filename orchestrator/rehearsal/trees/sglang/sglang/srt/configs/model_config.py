"""Model configuration read from a checkpoint folder's config.json, and its context length."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

CONTEXT_LENGTH_KEYS = ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"]
SUB_CONFIGS = ("text_config", "vision_config")  # a multimodal model's parts, configs of their own


class PretrainedConfig:
    """config.json as attributes; a missing key raises AttributeError like transformers does."""

    def __init__(self, values: dict):
        self.__dict__.update(values)
        for key in SUB_CONFIGS:
            if isinstance(values.get(key), dict):
                setattr(self, key, PretrainedConfig(values[key]))


def get_config(model_path: str) -> PretrainedConfig:
    path = Path(model_path) / "config.json"
    if not path.is_file():
        raise OSError(
            f"{model_path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{model_path}/tree/main' for available files."
        )
    return PretrainedConfig(json.loads(path.read_text()))


def get_context_length(config: PretrainedConfig) -> int:
    for key in CONTEXT_LENGTH_KEYS:
        value = getattr(config, key, None)
        if value is not None:
            return int(value)
    return 2048


def _allow_overwrite_longer_context_len() -> bool:
    value = os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "false").strip().lower()
    ci = os.environ.get("SGLANG_IS_IN_CI", "false").strip().lower()
    return value in ("1", "true", "yes", "y") or ci in ("1", "true", "yes", "y")


class ModelConfig:
    def __init__(self, model_path: str, context_length: int | None = None, is_draft_model: bool = False, dtype: str = "auto"):
        self.model_path = model_path
        self.is_draft_model = is_draft_model
        self.hf_config = get_config(model_path)
        self.hf_text_config = getattr(self.hf_config, "text_config", self.hf_config)
        self.architectures = list(getattr(self.hf_config, "architectures", []) or [])
        self.model_type = getattr(self.hf_config, "model_type", None)
        self.hidden_size = self.hf_text_config.hidden_size
        self.num_hidden_layers = self.hf_text_config.num_hidden_layers
        self.vocab_size = self.hf_text_config.vocab_size
        self.dtype = dtype

        derived_context_len = get_context_length(self.hf_text_config)
        if context_length is not None:
            if context_length > derived_context_len:
                reason = "Target model's" if is_draft_model else "User-specified"
                msg = (
                    f"Warning: {reason} context_length ({context_length}) is greater than the derived "
                    f"context_length ({derived_context_len}). This may lead to incorrect model outputs or "
                    f"CUDA errors. Note that the derived context_length may differ from "
                    f"max_position_embeddings in the model's config."
                )
                if _allow_overwrite_longer_context_len():
                    logger.warning(msg)
                    self.context_len = context_length
                else:
                    raise ValueError(
                        f"{msg} To allow overriding this maximum, set the env var "
                        f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
                    )
            else:
                self.context_len = context_length
        else:
            self.context_len = derived_context_len
