"""Kimi-VL rehearsal target: the multimodal wrapper around a DeepSeek-V2 text model.

In every emulated release this class has no `set_eagle3_layers_to_capture` (nor any other hook
the EAGLE worker asks a target for), so `--speculative-algorithm EAGLE3` fails at start-up with it:
AttributeError where the runner calls the method, ValueError where 0.5.23 checks for it first.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

from sglang.srt._torch import nn
from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM


class KimiVLForConditionalGeneration(nn.Module):
    def __init__(self, config, quant_config: Optional[object] = None, prefix: str = "", **kwargs) -> None:
        super().__init__()
        self.config = config
        self.vision_tower = None  # the rehearsal serves text only
        self.multi_modal_projector = None
        self.quant_config = quant_config
        self.language_model = DeepseekV2ForCausalLM(config.text_config, quant_config)

    def pad_input_ids(self, input_ids: List[int], mm_inputs=None):
        return input_ids

    def forward(self, input_ids, positions=None, forward_batch=None, get_embedding: bool = False):
        return self.language_model(input_ids, positions, forward_batch)

    def load_weights(self, weights: Iterable[Tuple[str, object]]):
        language_weights = [(name.replace("language_model.", ""), w) for name, w in weights if "vision_tower" not in name]
        self.language_model.load_weights(language_weights)


EntryClass = [KimiVLForConditionalGeneration]
