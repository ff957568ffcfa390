"""Correct variant: ``MLASelfAttention.get_query_key_value_tensors`` replaced by a wrapper taking ``*args`` and
``**kwargs`` and forwarding both to upstream's method. Every call Megatron makes binds and reaches upstream's body,
and no keyword is dropped; how many values it returns its source does not decide, which is an advisory."""

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

STRICT = False
_MLA = "megatron.core.transformer.multi_latent_attention"


def get_query_key_value_tensors(self, *args, **kwargs):
    from megatron.core.transformer.multi_latent_attention import MLASelfAttention

    return MLASelfAttention.__dict__["get_query_key_value_tensors"](self, *args, **kwargs)


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_MLA}:MLASelfAttention.get_query_key_value_tensors": "replaces with get_query_key_value_tensors",
    f"{_MLA}:MLASelfAttention": "reads",
}
