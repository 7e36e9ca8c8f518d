"""DeepseekV2/V3ForCausalLM (vLLM 0.33.0, rehearsal): SupportsEagle3, as the real file."""

from vllm.model_executor.models.interfaces import SupportsEagle3


class DeepseekV2ForCausalLM(SupportsEagle3):
    def get_eagle3_aux_hidden_state_layers(self, num_layers: int) -> tuple[int, ...]:
        return (2, num_layers // 2, num_layers - 3)


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
