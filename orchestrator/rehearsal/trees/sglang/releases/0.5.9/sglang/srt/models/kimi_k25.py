"""Kimi-K2.5 rehearsal target (SGLang 0.5.9).

As in 0.5.9, the class wraps a DeepSeek-V3 text model and forwards none of its speculative-decoding
hooks: it has no `set_eagle3_layers_to_capture` (EAGLE3: AttributeError at start-up) and no
`get_embed_and_head` (every EAGLE draft: AttributeError when the EAGLE worker starts). 0.5.10+
delegate both to `self.language_model`.
"""

from __future__ import annotations

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

        self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)

    def pad_input_ids(self, input_ids: List[int], mm_inputs: MultimodalInputs):
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
        """Load weights for the model, separating vision and language weights"""
        language_weights = []
        for name, loaded_weight in weights:
            if "vision_tower" in name or "mm_projector" in name:
                continue  # no vision tower in the rehearsal
            name = name.replace("language_model.", "")
            language_weights.append((name, loaded_weight))

        # Load language model weights
        self.language_model.load_weights(language_weights)


EntryClass = [KimiK25ForConditionalGeneration]
