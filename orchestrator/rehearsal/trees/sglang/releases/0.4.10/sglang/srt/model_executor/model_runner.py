"""ModelRunner of SGLang 0.4.10.post2 (rehearsal).

EAGLE-3 aux capture as 0.4.10 sets it up: after the CUDA graphs, for `--speculative-algorithm EAGLE3`
only, `initialize` reads the aux layer ids from the draft config and calls
`self.model.set_eagle3_layers_to_capture` without asking whether the target class has it: a class
without it is an AttributeError at start-up. This release reads no `use_aux_hidden_state` from the
draft config. With `EAGLE` nothing is captured and the draft gets the last layer's hidden state alone.
"""

from __future__ import annotations

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.rehearsal_runner import RehearsalModelRunner


class ModelRunner(RehearsalModelRunner):
    def __init__(self, model_config, server_args, gpu_id: int, tp_rank: int, memory, is_draft_worker: bool = False):
        super().__init__(model_config, server_args, gpu_id, tp_rank, memory, is_draft_worker)
        self.initialize()

    def initialize(self) -> None:
        server_args = self.server_args
        if not self.is_draft_worker:
            self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        self.init_cuda_graphs()

        # auxiliary hidden capture mode. TODO: expose this to server args?
        if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:
            # load draft config
            draft_model_config = ModelConfig(server_args.speculative_draft_model_path, is_draft_model=True)

            try:
                # get the aux layer from draft model config
                eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)
                eagle_aux_hidden_state_layer_ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
            except Exception:
                # if there is no aux layer, set to None
                eagle_aux_hidden_state_layer_ids = None

            self.model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)
