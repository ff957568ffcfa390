"""Seeded break: ``TEGroupedMLP._apply_bias``, a static method upstream, is replaced by a plain function set on the
class. Megatron's ``self._apply_bias(output, output_bias, tokens_per_expert, permuted_probs)`` then passes the
instance first: five positional arguments to a function of four."""

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

_EXPERTS = "megatron.core.transformer.moe.experts"
_saved = {}


def apply_bias(intermediate_parallel, bias_parallel, tokens_per_expert, permuted_probs):
    return _saved["bias"].__func__(intermediate_parallel, bias_parallel, tokens_per_expert, permuted_probs)


def apply_replacements():
    from megatron.core.transformer.moe.experts import TEGroupedMLP

    _saved["bias"] = TEGroupedMLP.__dict__["_apply_bias"]
    TEGroupedMLP._apply_bias = apply_bias


def undo_replacements():
    from megatron.core.transformer.moe.experts import TEGroupedMLP

    TEGroupedMLP._apply_bias = _saved.pop("bias")


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_EXPERTS}:TEGroupedMLP._apply_bias": "replaces with apply_bias",
    f"{_EXPERTS}:TEGroupedMLP": "reads",
}
