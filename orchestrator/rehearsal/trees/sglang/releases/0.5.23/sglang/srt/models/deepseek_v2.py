"""DeepSeek-V2/V3 rehearsal targets (SGLang 0.5.23): the classes implement
`set_eagle3_layers_to_capture`, so with EAGLE-3 they hand the draft three captured layers. From
0.5.15 the +1 on the draft's layer ids applies only when they start at 1 (SpecForge's default)."""

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
            # TODO (Qiaolin-Yu): check if other draft models need similar layer id
            # adjustment
            if layer_ids and layer_ids[0] == 1:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
            else:
                self.model.layers_to_capture = list(layer_ids)


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


class DeepseekV32ForCausalLM(DeepseekV2ForCausalLM):
    pass


EntryClass = [DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, DeepseekV32ForCausalLM]
