"""SpeculativeConfig (vLLM 0.33.0, rehearsal): the method Literals and the `--speculative-config`
fields the rehearsal honours (a subset of the real ones, all real names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MTPModelTypes = Literal["deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "qwen3_next_mtp", "mtp"]
DFlashModelTypes = Literal["dflash"]
EagleModelTypes = Literal["eagle", "eagle3", "extract_hidden_states", MTPModelTypes, DFlashModelTypes]
SpeculativeMethod = Literal["ngram", "draft_model", "suffix", "custom_class", EagleModelTypes]


@dataclass
class SpeculativeConfig:
    num_speculative_tokens: int | None = None
    model: str | None = None
    method: SpeculativeMethod | None = None
    draft_tensor_parallel_size: int | None = None
    quantization: str | None = None
    max_model_len: int | None = None
    revision: str | None = None
    code_revision: str | None = None
    disable_by_batch_size: int | None = None
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None
    speculative_token_tree: str | None = None

    def __post_init__(self):
        self.draft_model_config = DraftModelConfig(self.model or "")
        # Automatically detect the method (the real release's chain, config/speculative.py:1433-1447)
        if self.method in ("eagle", "eagle3", "dflash"):
            pass
        elif "eagle-" in self.draft_model_config.model.lower():
            self.method = "eagle"
        elif "eagle3" in self.draft_model_config.model.lower():
            self.method = "eagle3"


@dataclass
class DraftModelConfig:
    """The rehearsal's ModelConfig of the draft: only its path."""

    model: str = ""


def verify_eagle3_target(method: str | None, model_type: str) -> None:
    """0.33.0 restricts EAGLE-3 targets by interface only (the model runner's supports_eagle3)."""
