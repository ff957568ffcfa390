"""Megatron-Core adapter for osprey.

Supported megatron-core releases: 0.13.x, 0.15.x, 0.16.x, 0.19.x.

Importing this package only defines functions. It does not import Megatron,
does not patch anything and does not change global state. The grad all-reduce
replacement is installed only by an explicit call to
:func:`apply_chunked_grad_allreduce` and removed by
:func:`undo_chunked_grad_allreduce`.
"""

from .grad_allreduce import (
    DEFAULT_BUDGET_BYTES,
    MAX_CHUNKS_IN_FLIGHT,
    apply_chunked_grad_allreduce,
    chunk_tensors_by_bytes,
    is_chunked_grad_allreduce_applied,
    undo_chunked_grad_allreduce,
)
from .model_provider import (
    FREEZE_ARG,
    TRAIN_ONLY_ARG,
    apply_freeze_rules,
    wrap_model_provider,
)

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MAX_CHUNKS_IN_FLIGHT",
    "apply_chunked_grad_allreduce",
    "undo_chunked_grad_allreduce",
    "is_chunked_grad_allreduce_applied",
    "chunk_tensors_by_bytes",
    "FREEZE_ARG",
    "TRAIN_ONLY_ARG",
    "apply_freeze_rules",
    "wrap_model_provider",
]
