"""Seeded break: ``forward`` swapped on every built ``TransformerLayer`` by a wrapper that returns the hidden states
alone, where Megatron's ``TransformerBlock`` unpacks ``hidden_states, context = layer(...)``."""

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

_LAYER = "megatron.core.transformer.transformer_layer"
REPLACED_ON_INSTANCES = [f"{_LAYER}:TransformerLayer.forward"]


def apply_replacements(model=None):
    from megatron.core.transformer.transformer_layer import TransformerLayer

    for module in model.modules():
        if isinstance(module, TransformerLayer):
            original = type(module).forward.__get__(module)
            module.forward = lambda *args, _original=original, **kwargs: _original(*args, **kwargs)[0]


def undo_replacements(model=None):
    from megatron.core.transformer.transformer_layer import TransformerLayer

    for module in model.modules():
        if isinstance(module, TransformerLayer):
            vars(module).pop("forward", None)


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_LAYER}:TransformerLayer.forward": "replaces",
    f"{_LAYER}:TransformerLayer": "reads",
}
