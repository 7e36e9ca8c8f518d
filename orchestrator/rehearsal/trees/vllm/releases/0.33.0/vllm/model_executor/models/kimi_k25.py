"""KimiK25ForConditionalGeneration (vLLM 0.33.0, rehearsal): SupportsEagle3, delegating to its
DeepSeek-V3 language model as the real file does."""

from vllm.model_executor.models.interfaces import SupportsEagle3


class KimiK25ForConditionalGeneration(SupportsEagle3):
    def get_eagle3_aux_hidden_state_layers(self, num_layers: int) -> tuple[int, ...]:
        return (2, num_layers // 2, num_layers - 3)
