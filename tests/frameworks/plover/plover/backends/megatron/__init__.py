"""Megatron-Core adapter for plover.

Importing this package does not import Megatron, patch anything or touch any
global state. The grad all-reduce replacement is installed only when
:func:`apply_chunked_grad_allreduce` is called, and removed by
:func:`undo_chunked_grad_allreduce`.

The chunk budget lives in ``plover.backends.megatron.grad_reduce.PLOVER_CHUNK_BYTES``
(set it on that module, not on this package).
"""

from .grad_reduce import (
    apply_chunked_grad_allreduce,
    chunked_allreduce_non_tensor_model_parallel_grads,
    is_chunked_grad_allreduce_applied,
    split_into_byte_chunks,
    undo_chunked_grad_allreduce,
)
from .provider import apply_freeze_rules, wrap_model_provider

__all__ = [
    "apply_chunked_grad_allreduce",
    "apply_freeze_rules",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "is_chunked_grad_allreduce_applied",
    "split_into_byte_chunks",
    "undo_chunked_grad_allreduce",
    "wrap_model_provider",
]
