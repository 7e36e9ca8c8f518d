"""EAGLE-3 draft model for Llama-style targets (SGLang 0.5.23, rehearsal).

Layout: the draft's decoder layers live in `layers` (`layers.0.*`, as SGLang 0.5.12+ names them);
`load_weights` renames the legacy `midlayer.*` keys of SpecForge checkpoints to `layers.0.*`
(`legacy_name_map`), so both layouts load. Keys it does not know are still skipped silently. `d2t`
holds offsets: hot_token_id = d2t + arange, so a d2t of absolute ids maps every draft id to a wrong
target id. `fc` is as wide as the target's hidden size times the number of aux layers in the draft
config's `eagle_config` (3 when it names none).

The draft runs on the target's hidden states: aux-layers * hidden wide when the target captures
them (then `fc` folds them to hidden), hidden wide when it does not (then `fc` is skipped).
"""

from __future__ import annotations

from sglang.srt import _torch as torch
from sglang.srt._torch import nn
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.linear import QKVParallelLinear, default_weight_loader
from sglang.srt.layers.logits_processor import LogitsProcessor
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from sglang.srt.models.llama import LlamaDecoderLayer, LlamaMLP


class LlamaDecoderLayer(LlamaDecoderLayer):
    def __init__(self, config, layer_id: int = 0, quant_config=None, prefix: str = ""):
        super().__init__(config, layer_id, quant_config, prefix)

        # Input layer concats embeds + target_hidden before qkv (input dim 2x).
        self.is_input_layer = layer_id == 0
        hidden_size = 2 * self.hidden_size if self.is_input_layer else self.hidden_size

        # override qkv
        self.self_attn.qkv_proj = QKVParallelLinear(
            hidden_size,
            self.self_attn.head_dim,
            self.self_attn.num_heads,
            self.self_attn.num_kv_heads,
            bias=False,
        )
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size, getattr(config, "hidden_act", "silu"))
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        if self.is_input_layer:
            # Input layer consumes target hidden states; no carried residual to fuse.
            residual = hidden_states
            hidden_states = self.hidden_norm(hidden_states)
            embeds = self.input_layernorm(embeds)
            hidden_states = torch.cat([embeds, hidden_states], dim=-1)
        else:
            # Fuse the previous layer's MLP residual add into hidden_norm.
            hidden_states, residual = self.hidden_norm(hidden_states, residual)

        # Self Attention
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)

        # Fully Connected
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class LlamaModel(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        self.config = config
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        if hasattr(config, "target_hidden_size"):
            self.hidden_size_in = config.target_hidden_size
        else:
            self.hidden_size_in = config.hidden_size

        # num_aux resolution: explicit attr > eagle_config layer_ids > default 3.
        self.num_aux_hidden_states = getattr(config, "num_aux_hidden_states", None)
        if self.num_aux_hidden_states is None:
            eagle_config = getattr(config, "eagle_config", None) or {}
            layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
            self.num_aux_hidden_states = len(layer_ids) if layer_ids else 3

        self.fc = torch.nn.Linear(
            self.hidden_size_in * self.num_aux_hidden_states, config.hidden_size, bias=getattr(config, "bias", False)
        )
        self.fc.weight.weight_loader = default_weight_loader
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i, quant_config, prefix) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids, positions, forward_batch, input_embeds=None):
        if input_embeds is None:
            embeds = self.embed_tokens(input_ids)
        else:
            embeds = input_embeds

        hidden_states = forward_batch.spec_info.hidden_states
        if hidden_states.shape[-1] != embeds.shape[-1]:
            hidden_states = self.fc(hidden_states)

        # idle batch
        if hidden_states.shape[0] == 0:
            return hidden_states, [hidden_states]

        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, embeds, hidden_states, forward_batch, residual)

        hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states, residual)

        # Draft decode captures pre-norm hidden by default.
        return hidden_states_to_logits, [hidden_states_to_aux]


class LlamaForCausalLMEagle3(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        self.config = config
        self.quant_config = quant_config
        self.model = LlamaModel(config, quant_config=quant_config, prefix="model")
        self.load_lm_head_from_target = False
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head = self.model.embed_tokens
        else:
            if getattr(config, "draft_vocab_size", None) is None:
                self.load_lm_head_from_target = True
                config.draft_vocab_size = config.vocab_size
            self.lm_head = ParallelLMHead(config.draft_vocab_size, config.hidden_size)

        self.logits_processor = LogitsProcessor(config)
        self.capture_aux_hidden_states = True
        self.hot_token_id = None

    def forward(self, input_ids, positions, forward_batch):
        hidden_states, aux_hidden_states = self.model(input_ids, positions, forward_batch)
        return self.logits_processor(input_ids, hidden_states, self.lm_head, aux_hidden_states[0])

    def load_weights(self, weights) -> None:
        params_dict = dict(self.named_parameters())
        # Define the parameter mapping for stacked parameters
        stacked_params_mapping = [
            # (param_name, shard_name, shard_id)
            (".qkv_proj", ".q_proj", "q"),
            (".qkv_proj", ".k_proj", "k"),
            (".qkv_proj", ".v_proj", "v"),
            (".gate_up_proj", ".gate_proj", 0),
            (".gate_up_proj", ".up_proj", 1),
        ]

        # Legacy weight names -> new module attribute names (backwards compat).
        legacy_name_map = {
            "midlayer": "layers.0",
            "aux_norm_low": "fc_norm.0",
            "aux_norm_mid": "fc_norm.1",
            "aux_norm_high": "fc_norm.2",
        }

        for name, loaded_weight in weights:
            for legacy, new in legacy_name_map.items():
                if legacy in name:
                    name = name.replace(legacy, new)

            if "d2t" in name:
                # d2t stores diffs between draft id and target id
                self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])
                continue

            if "t2d" in name:
                continue

            for param_name, weight_name, shard_id in stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                param_name = f"model.{name}" if name not in params_dict else name
                if param_name in params_dict:
                    param = params_dict[param_name]
                    weight_loader = getattr(param, "weight_loader", default_weight_loader)
                    weight_loader(param, loaded_weight, shard_id)
                break
            else:
                # Handle regular parameters
                param_name = name if name in params_dict else f"model.{name}"
                if param_name in params_dict:
                    param = params_dict[param_name]
                    weight_loader = getattr(param, "weight_loader", default_weight_loader)
                    weight_loader(param, loaded_weight)

    def get_hot_token_id(self):
        return self.hot_token_id

    def set_embed(self, embed) -> None:
        # NOTE: If draft hidden size != target hidden size, the embed weight cannot be shared for EAGLE3
        if hasattr(self.config, "target_hidden_size") and self.config.target_hidden_size != self.config.hidden_size:
            return
        self.model.embed_tokens.weight = embed

    def set_embed_and_head(self, embed, head) -> None:
        self.model.embed_tokens.weight = embed
        self.lm_head.weight = head


EntryClass = [LlamaForCausalLMEagle3]
