"""LlamaForCausalLM (rehearsal): supports EAGLE-3 in every release, as the real one."""

from vllm.model_executor.models.interfaces import SupportsEagle3


class LlamaForCausalLM(SupportsEagle3):
    def get_eagle3_aux_hidden_state_layers(self, num_layers: int) -> tuple[int, ...]:
        return (2, num_layers // 2, num_layers - 3)
