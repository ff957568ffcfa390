"""tern: an LLM/RL training framework built on Megatron-Core.

Importing this package (or any of its subpackages) has no side effects: it does
not import torch or Megatron, does not patch anything, does not read environment
variables, does not configure logging and does not touch any other global state.
Megatron is only patched inside ``with chunked_grad_allreduce(bucket_mb=...)``.
"""

from .config import TernConfig
from .mcore.chunking import Segment, mib_to_bytes, split_into_chunks
from .mcore.grad_allreduce import (
    chunked_allreduce_non_tensor_model_parallel_grads,
    chunked_grad_allreduce,
)
from .mcore.provider import wrap

__all__ = [
    "TernConfig",
    "Segment",
    "mib_to_bytes",
    "split_into_chunks",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "chunked_grad_allreduce",
    "wrap",
]
