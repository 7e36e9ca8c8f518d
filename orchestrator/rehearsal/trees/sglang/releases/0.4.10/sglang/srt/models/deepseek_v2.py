"""DeepSeek-V2/V3 rehearsal targets (SGLang 0.4.10.post2): in this release the classes have no
`set_eagle3_layers_to_capture`, so `--speculative-algorithm EAGLE3` fails at start-up with them."""

from __future__ import annotations

from sglang.srt.models.rehearsal_target import RehearsalCausalLM


class DeepseekV2ForCausalLM(RehearsalCausalLM):
    pass


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


EntryClass = [DeepseekV2ForCausalLM, DeepseekV3ForCausalLM]
