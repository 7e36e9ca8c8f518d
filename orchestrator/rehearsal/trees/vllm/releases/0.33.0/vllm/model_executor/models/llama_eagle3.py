"""EAGLE-3 draft for Llama-style targets (vLLM 0.33.0, rehearsal).

As the real file: `hf_to_vllm_mapper = WeightsMapper(orig_to_new_substr={"midlayer.": "layers.0."},
...)`, and `AutoWeightsLoader` refuses a name it cannot place: `ValueError: There is no module or
parameter named 'x' in Eagle3LlamaForCausalLM`. `fc`'s input width is target_hidden_size x the number
of aux layers: `num_aux_hidden_states`, else len(eagle_config["eagle_aux_hidden_state_layer_ids"]),
else 3; with `eagle_config.use_aux_hidden_state: false` there is no fc (its weights are skipped) and
the draft reads the target's last hidden state. `d2t` is loaded into `draft_id_to_target_id`
(offsets).
"""

from __future__ import annotations

import numpy as np

from vllm._rehearsal.draft import Draft, check_shape

_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")
hf_to_vllm_mapper = {"midlayer.": "layers.0."}


def use_aux_hidden_state(config: dict) -> bool:
    return bool((config.get("eagle_config") or {}).get("use_aux_hidden_state", True))


class Eagle3LlamaForCausalLM:
    def __init__(self, config: dict):
        self.config = config
        hidden = int(config["hidden_size"])
        self.use_aux_hidden_state = use_aux_hidden_state(config)
        eagle_config = config.get("eagle_config") or {}
        layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
        self.num_aux_hidden_states = config.get("num_aux_hidden_states") or (len(layer_ids) if layer_ids else 3)
        self.fc_input_size = int(config.get("target_hidden_size", hidden)) * int(self.num_aux_hidden_states)
        self.params = {f"model.layers.{i}.{part}.weight": None for i in range(int(config.get("num_hidden_layers", 1)))
                       for part in _LAYER}
        self.params.update({"model.norm.weight": (hidden,), "model.embed_tokens.weight": None,
                            "lm_head.weight": (int(config["draft_vocab_size"]), hidden),
                            "draft_id_to_target_id": (int(config["draft_vocab_size"]),)})
        if self.use_aux_hidden_state:
            self.params["model.fc.weight"] = (hidden, self.fc_input_size)

    def load_weights(self, weights) -> Draft:
        loaded: dict[str, np.ndarray] = {}
        for name, loaded_weight in weights:
            if "t2d" in name:
                continue
            if "d2t" in name:
                name = name.replace("d2t", "draft_id_to_target_id")
            elif "lm_head" not in name:
                name = "model." + name
            if name.startswith("model.fc.") and not self.use_aux_hidden_state:
                continue
            for old, new in hf_to_vllm_mapper.items():
                name = name.replace(old, new)
            if name not in self.params:
                raise ValueError(f"There is no module or parameter named {name!r} in {type(self).__name__}")
            if self.params[name] is not None:
                check_shape(name, self.params[name], loaded_weight)
            loaded[name.removeprefix("model.")] = loaded_weight
        d2t = loaded.pop("draft_id_to_target_id", np.zeros(int(self.config["draft_vocab_size"]))).astype(np.int64)
        return Draft(loaded, d2t, self.use_aux_hidden_state, float(self.config.get("rms_norm_eps", 1e-5)))
