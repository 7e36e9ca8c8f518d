"""EAGLE-3 draft for Llama-style targets (vLLM 0.10.1.1, rehearsal).

As the real file: the draft layer lives in `self.layers` (parameters `layers.0.*`);
`LlamaModel.load_weights` renames `midlayer.` to `layers.0.` and looks every other name up with
`params_dict[name]`, so a key it does not know is a KeyError at start-up; `self.fc` is
`torch.nn.Linear(self.config.target_hidden_size * 3, ...)` (or hidden_size * 3) whatever the draft's
aux layer ids; `d2t` goes into `draft_id_to_target_id`, used as offsets (targets = base + d2t).
"""

from __future__ import annotations

import numpy as np

from vllm._rehearsal.draft import Draft, check_shape

_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")


class LlamaModel:
    def __init__(self, config: dict):
        hidden = int(config["hidden_size"])
        if "target_hidden_size" in config:
            fc_in = int(config["target_hidden_size"]) * 3
        else:
            fc_in = hidden * 3
        self.params_dict = {f"layers.0.{part}.weight": None for part in _LAYER}
        self.params_dict.update({"fc.weight": (hidden, fc_in), "norm.weight": (hidden,),
                                 "embed_tokens.weight": (int(config["vocab_size"]), hidden)})
        self.loaded: dict[str, np.ndarray] = {}

    def load_weights(self, weights) -> set[str]:
        params_dict = self.params_dict
        for name, loaded_weight in weights:
            if 'midlayer.' in name:
                name = name.replace('midlayer.', 'layers.0.')
            if name not in params_dict:
                raise KeyError(name)  # the real loader's params_dict[name]
            if params_dict[name] is not None:
                check_shape(name, params_dict[name], loaded_weight)
            self.loaded[name] = loaded_weight
        return set(self.loaded)


class Eagle3LlamaForCausalLM:
    def __init__(self, config: dict):
        self.config = config
        self.model = LlamaModel(config)
        self.draft_id_to_target_id = np.zeros(int(config["draft_vocab_size"]), dtype=np.int64)
        self.lm_head: np.ndarray | None = None

    def load_weights(self, weights) -> Draft:
        model_weights = []
        for name, loaded_weight in weights:
            if "t2d" in name:
                continue
            if "d2t" in name:
                self.draft_id_to_target_id = loaded_weight.astype(np.int64)
            elif "lm_head" in name:
                self.lm_head = loaded_weight
            else:
                model_weights.append((name, loaded_weight))
        self.model.load_weights(model_weights)
        weights = dict(self.model.loaded, **{"lm_head.weight": self.lm_head})
        return Draft(weights, self.draft_id_to_target_id, True, float(self.config.get("rms_norm_eps", 1e-5)))
