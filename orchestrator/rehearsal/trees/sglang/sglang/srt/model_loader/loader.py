"""Build a model class from its architecture name and load its weights."""

from __future__ import annotations

from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator, weight_files


def get_model_architecture(model_config):
    from sglang.srt.models.registry import ModelRegistry

    return ModelRegistry().resolve_model_cls(model_config.architectures)


def get_model(model_config):
    model_class, _ = get_model_architecture(model_config)
    model = model_class(model_config.hf_config)
    model.load_weights(safetensors_weights_iterator(weight_files(model_config.model_path)))
    return model
