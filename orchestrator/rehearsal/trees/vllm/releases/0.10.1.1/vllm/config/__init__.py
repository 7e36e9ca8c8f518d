"""SpeculativeConfig (vLLM 0.10.1.1, rehearsal): the method Literal, the fields `--speculative-config`
accepts (the real ones) and the EAGLE-3 target restriction, in `config/__init__.py` as the real release."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

SpeculativeMethod = Literal["ngram", "eagle", "eagle3", "medusa",
                            "mlp_speculator", "draft_model", "deepseek_mtp"]


@dataclass
class SpeculativeConfig:
    num_speculative_tokens: int = None  # type: ignore
    model: Optional[str] = None
    method: Optional[SpeculativeMethod] = None
    draft_tensor_parallel_size: Optional[int] = None
    disable_logprobs: bool = True
    quantization: Optional[str] = None
    max_model_len: Optional[int] = None
    revision: Optional[str] = None
    code_revision: Optional[str] = None
    disable_by_batch_size: Optional[int] = None
    prompt_lookup_max: Optional[int] = None
    prompt_lookup_min: Optional[int] = None
    speculative_token_tree: Optional[str] = None

    def __post_init__(self):
        self.draft_model_config = DraftModelConfig(self.model)
        # Automatically detect the method (the real release's chain, config/__init__.py:2134-2139)
        if self.method in ('eagle', 'eagle3'):
            pass
        elif "eagle-" in self.draft_model_config.model.lower() or \
                "eagle3-" in self.draft_model_config.model.lower():
            self.method = "eagle"


@dataclass
class DraftModelConfig:
    """The rehearsal's ModelConfig of the draft: only its path."""

    model: str = ""


def verify_eagle3_target(method: str | None, model_type: str) -> None:
    eagle3_target_supported = ["llama", "qwen"]
    if method == "eagle3" and not any(supported_model in model_type for supported_model in eagle3_target_supported):
        raise ValueError(
            f"Eagle3 is only supported for {eagle3_target_supported} models. "  # noqa: E501
            f"Got self.target_model_config.hf_text_config.model_type={model_type!r}")
