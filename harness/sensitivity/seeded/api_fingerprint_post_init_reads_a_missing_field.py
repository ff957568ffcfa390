"""Seeded break: ``TransformerConfig.__post_init__`` wrapped by a closure made at apply time that reads a field no
release has (``dropout_schedule``): the config Megatron builds raises as soon as it is constructed."""

import functools

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

_CONFIG = "megatron.core.transformer.transformer_config"
_saved = []


def apply_replacements():
    from megatron.core.transformer.transformer_config import TransformerConfig

    original = TransformerConfig.__dict__["__post_init__"]

    @functools.wraps(original)
    def post_init(self):
        original(self)
        if self.dropout_schedule is not None:
            self.hidden_dropout = 0.0

    _saved.append(original)
    TransformerConfig.__post_init__ = post_init


def undo_replacements():
    from megatron.core.transformer.transformer_config import TransformerConfig

    TransformerConfig.__post_init__ = _saved.pop()


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_CONFIG}:TransformerConfig.__post_init__": "replaces",
    f"{_CONFIG}:TransformerConfig": "reads",
}
