"""Aux hidden-state capture set-up before the CUDA graphs (SGLang 0.5.23, rehearsal)."""

from __future__ import annotations


def configure_aux_hidden_state_capture(*, model, eagle_use_aux_hidden_state: bool, eagle_aux_hidden_state_layer_ids) -> None:
    """Configure auxiliary hidden state capture for speculative decoding.

    Must be called before CUDA graph capture so the captured graphs
    include aux hidden state output paths.
    """
    if eagle_use_aux_hidden_state:
        if not hasattr(model, "set_eagle3_layers_to_capture"):
            raise ValueError(
                f"Model {model.__class__.__name__} does not implement "
                "set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state "
                "capture requires."
            )
        model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)
