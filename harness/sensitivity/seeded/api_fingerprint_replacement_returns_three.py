"""Seeded break: ``MLASelfAttention.get_query_key_value_tensors`` replaced by the three-value method of 0.13/0.15,
while from 0.16 on Megatron's own ``MultiLatentAttention.forward`` unpacks five values from it."""

from harness.reference import *  # noqa: F403
from harness.reference import MEGATRON_SYMBOLS as _REFERENCE_SYMBOLS

_MLA = "megatron.core.transformer.multi_latent_attention"


def get_query_key_value_tensors(
    self,
    hidden_states,
    key_value_states=None,
    position_ids=None,
    packed_seq_params=None,
    inference_context=None,
    *,
    inference_params=None,
):
    return hidden_states, hidden_states, hidden_states


MEGATRON_SYMBOLS = {
    **_REFERENCE_SYMBOLS,
    f"{_MLA}:MLASelfAttention.get_query_key_value_tensors": "replaces with get_query_key_value_tensors",
}
