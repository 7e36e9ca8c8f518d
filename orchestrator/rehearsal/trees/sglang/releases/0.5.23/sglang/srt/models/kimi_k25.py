"""Kimi-K2.5 rehearsal target (SGLang 0.5.23).

As in 0.5.10+, the class delegates its speculative-decoding hooks to the DeepSeek-V3 text model
it wraps: `set_eagle3_layers_to_capture` (EAGLE3 capture works) and `get_embed_and_head` (what the
EAGLE worker asks the target for), each raising AttributeError when the inner model lacks it.
"""

from __future__ import annotations

from array import array
from typing import Iterable, List, Optional, Tuple

from sglang.srt import _torch as torch
from sglang.srt._torch import nn
from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM

MultimodalInputs = dict  # the rehearsal serves text only: no multimodal inputs reach the model


class KimiK25ForConditionalGeneration(nn.Module):
    def __init__(
        self,
        config,
        quant_config: Optional[object] = None,
        prefix: str = "",
        **kwargs,  # fix init_tts argument error
    ) -> None:
        super().__init__()
        self.config = config
        self.quant_config = quant_config
        # the rehearsal serves text only: no vision tower, no mm projector
        self.vision_tower = None
        self.mm_projector = None

        self.language_model = None
        if not getattr(config, "encoder_only", False):
            self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)

    def pad_input_ids(self, input_ids: array, mm_inputs: MultimodalInputs) -> array:
        return input_ids

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor = None,
        forward_batch=None,
        get_embedding: bool = False,
    ):
        hidden_states = self.language_model(input_ids, positions, forward_batch)

        return hidden_states

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]):
        """Stream the language weights to the language model; the rehearsal has no vision tower."""

        def stream_language_weights():
            for name, loaded_weight in weights:
                if "vision_tower" in name or "mm_projector" in name:
                    continue
                yield name.replace("language_model.", ""), loaded_weight

        if self.language_model is not None:
            self.language_model.load_weights(stream_language_weights())

    def set_eagle3_layers_to_capture(
        self, layer_ids: Optional[List[int]] = None
    ) -> None:
        """Set the layers to capture for EAGLE3 speculative decoding."""
        if self.language_model is None or not hasattr(
            self.language_model, "set_eagle3_layers_to_capture"
        ):
            raise AttributeError(
                "language_model does not support EAGLE3 speculative decoding."
            )

        self.language_model.set_eagle3_layers_to_capture(layer_ids)

    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Get embedding and LM head weights for speculative decoding."""
        if self.language_model is None or not hasattr(
            self.language_model, "get_embed_and_head"
        ):
            raise AttributeError(
                "language_model does not support get_embed_and_head()."
            )

        return self.language_model.get_embed_and_head()


EntryClass = [KimiK25ForConditionalGeneration]
