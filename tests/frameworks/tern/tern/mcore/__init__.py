"""Megatron-Core adapters of tern (chunked TP grad all-reduce, model-provider wrapper).

Importing this subpackage patches nothing and imports neither torch nor Megatron.
"""

from .chunking import Segment, mib_to_bytes, split_into_chunks
from .grad_allreduce import (
    chunked_allreduce_non_tensor_model_parallel_grads,
    chunked_grad_allreduce,
)
from .provider import wrap

__all__ = [
    "Segment",
    "mib_to_bytes",
    "split_into_chunks",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "chunked_grad_allreduce",
    "wrap",
]
