"""DeepseekV2/V3ForCausalLM (vLLM 0.10.1.1, rehearsal): without SupportsEagle3, as the real file."""


class DeepseekV2ForCausalLM:
    pass


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
