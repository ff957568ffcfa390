"""Megatron's names the gate itself relies on, and the sizes of the small models it builds, in one place.

A release that moves one of these moves it for every family at once, so the harness spells each exactly once. No
torch or Megatron import: the noxfile and the report load this module too. (The reference subject keeps its own
copy in ``harness/reference/megatron_api.py``: it is written as a framework writes its adapter, importing nothing
from the gate.)
"""

from __future__ import annotations

from dataclasses import dataclass

FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
"""The module whose private all-reduce adapters replace (not the function of the same name it re-exports)."""

MEGATRON_MODULES = ("megatron.core", FINALIZE_MODULE)
"""What every family needs importable before it can check anything, and what a framework's install must leave
importable."""

UPSTREAM_NAME = "_allreduce_non_tensor_model_parallel_grads"
"""The function adapters replace with a chunked all-reduce."""

ALIAS_NAME = "_allreduce_layernorm_grads"
"""Its older name, kept by some releases as an alias of the same function."""

RNG_MODULE = "megatron.core.tensor_parallel.random"
"""Where Megatron keeps the CUDA RNG tracker a model build needs."""


@dataclass(frozen=True)
class ModelSizes:
    """The sizes of a GPT small enough to build in milliseconds on CPU; 4 heads, so any TP size the cases use
    divides them."""

    num_layers: int = 2
    hidden_size: int = 16
    num_attention_heads: int = 4
    vocab_size: int = 64
    seq_length: int = 8
    micro_batch_size: int = 2


TINY_GPT = ModelSizes()
"""The one size of every model the gate builds: the real GPT step, the provider's GPT and the populations' config."""
