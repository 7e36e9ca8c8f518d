"""Kimi-K2.5 rehearsal target.

This class has no `set_eagle3_layers_to_capture`: with EAGLE-3 the model runner then hands the
draft the last layer's hidden state (width hidden_size) instead of three captured layers, the
draft's `shape[-1] != embeds.shape[-1]` gate skips `fc`, and its drafts are garbage
(accept length ~1.0). A patch can add the method just before `get_input_embeddings`.
"""

from __future__ import annotations

from sglang.srt.models.rehearsal_target import RehearsalCausalLM


class KimiK25ForConditionalGeneration(RehearsalCausalLM):
    """Multimodal wrapper around the text model; the rehearsal serves text only."""

    has_image_understanding = True

    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__(config, quant_config, prefix)
        self.vision_tower = None
        self.mm_projector = None

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def pad_input_ids(self, input_ids, mm_inputs=None):
        return input_ids


EntryClass = [KimiK25ForConditionalGeneration]
