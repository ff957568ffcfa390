"""Megatron-Core adapters of petrel.

Nothing here is applied on import; call :func:`install` explicitly.
"""

from .grad_allreduce import (
    chunked_allreduce_non_tensor_model_parallel_grads,
    install,
    installed_chunk_bytes,
    is_installed,
    patched,
    split_grads_by_dtype,
    uninstall,
)
from .provider import apply_freeze_rules, wrap

__all__ = [
    "apply_freeze_rules",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "install",
    "installed_chunk_bytes",
    "is_installed",
    "patched",
    "split_grads_by_dtype",
    "uninstall",
    "wrap",
]
