"""ModelRunner of SGLang 0.5.23 (rehearsal).

EAGLE-3 aux capture as 0.5.23 sets it up: `model_runner_components/spec_aux_hidden_state.py`
decides whether to capture (only for `--speculative-algorithm EAGLE3`, unless the draft config's
`eagle_config.use_aux_hidden_state` is false) and `attention_backend_setup.py` asks the target
class for `set_eagle3_layers_to_capture` before the CUDA graphs, raising a ValueError when it has none.
With `EAGLE` nothing is captured and the draft gets the last layer's hidden state alone.
"""

from __future__ import annotations

from sglang.srt.model_executor.model_runner_components.attention_backend_setup import configure_aux_hidden_state_capture
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import resolve_spec_aux_hidden_state_config
from sglang.srt.model_executor.rehearsal_runner import RehearsalModelRunner


class ModelRunner(RehearsalModelRunner):
    def __init__(self, model_config, server_args, gpu_id: int, tp_rank: int, memory, is_draft_worker: bool = False):
        super().__init__(model_config, server_args, gpu_id, tp_rank, memory, is_draft_worker)
        self.spec_aux_config = resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=model_config,
            spec_algorithm=self.spec_algorithm,
            is_draft_worker=is_draft_worker,
        )
        self.initialize()

    def initialize(self) -> None:
        if not self.is_draft_worker:
            self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        # Must run before CUDA graph capture so the captured graphs include the aux outputs.
        configure_aux_hidden_state_capture(
            model=self.model,
            eagle_use_aux_hidden_state=self.spec_aux_config.eagle_use_aux_hidden_state,
            eagle_aux_hidden_state_layer_ids=self.spec_aux_config.eagle_aux_hidden_state_layer_ids,
        )
        self.init_cuda_graphs()
