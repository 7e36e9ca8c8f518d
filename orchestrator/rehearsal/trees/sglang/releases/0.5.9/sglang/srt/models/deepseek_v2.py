"""DeepSeek-V2/V3 rehearsal targets (SGLang 0.5.9): the classes implement
`set_eagle3_layers_to_capture`, so with EAGLE-3 they hand the draft three captured layers."""

from __future__ import annotations

from typing import List, Optional

from sglang.srt.models.rehearsal_target import RehearsalCausalLM


class DeepseekV2ForCausalLM(RehearsalCausalLM):
    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        if layer_ids is None:
            self.capture_aux_hidden_states = True
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
            # we plus 1 here because in sglang, for the ith layer, it takes the output
            # of the (i-1)th layer as aux hidden state
            self.model.layers_to_capture = [val + 1 for val in layer_ids]


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


class DeepseekV32ForCausalLM(DeepseekV2ForCausalLM):
    pass


EntryClass = [DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, DeepseekV32ForCausalLM]
