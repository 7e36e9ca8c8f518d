"""Build a model class from its architecture name and load its weights."""

from __future__ import annotations

import importlib

from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator, weight_files

MODEL_MODULES = {
    "LlamaForCausalLM": "sglang.srt.models.llama",
    "KimiK25ForConditionalGeneration": "sglang.srt.models.kimi_k25",
    "LlamaForCausalLMEagle3": "sglang.srt.models.llama_eagle3",
}


def get_model_architecture(model_config):
    for arch in model_config.architectures:
        if arch in MODEL_MODULES:
            return getattr(importlib.import_module(MODEL_MODULES[arch]), arch), arch
    raise ValueError(
        f"Model architectures {model_config.architectures} are not supported for now. "
        f"Supported architectures: {sorted(MODEL_MODULES)}"
    )


def get_model(model_config):
    model_class, _ = get_model_architecture(model_config)
    model = model_class(model_config.hf_config)
    model.load_weights(safetensors_weights_iterator(weight_files(model_config.model_path)))
    return model
