"""The model interfaces the rehearsal's classes declare (vllm/model_executor/models/interfaces.py)."""


class SupportsEagle3:
    """A target that can hand EAGLE-3 its aux hidden states."""

    supports_eagle3 = True

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.aux_hidden_state_layers = layers


def supports_eagle3(model) -> bool:
    return isinstance(model, SupportsEagle3)
