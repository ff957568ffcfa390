"""Megatron-Core backend adapter for heron.

Importing this package has no side effects: it does not import Megatron or
torch, and it does not patch anything. The public names below are resolved
lazily, on first attribute access, from the submodules that define them:

* :func:`apply_chunked_grad_allreduce` / :func:`undo_chunked_grad_allreduce`
  (``heron.backends.megatron.finalize_patch``) install / remove the chunked
  replacement of ``megatron.core.distributed.finalize_model_grads.
  _allreduce_non_tensor_model_parallel_grads``.
* :func:`split_into_byte_chunks` (``heron.backends.megatron.grad_chunking``)
  splits a list of tensors into byte-budgeted chunks.
* :func:`wrap_model_provider` (``heron.backends.megatron.model_provider``)
  wraps a model provider so that freeze rules from ``args`` are applied.
"""

import importlib

_LAZY_EXPORTS = {
    "apply_chunked_grad_allreduce": "finalize_patch",
    "undo_chunked_grad_allreduce": "finalize_patch",
    "is_chunked_grad_allreduce_applied": "finalize_patch",
    "chunked_allreduce_non_tensor_model_parallel_grads": "finalize_patch",
    "ChunkedAllReduceConfig": "finalize_patch",
    "DEFAULT_BUDGET_BYTES": "finalize_patch",
    "split_into_byte_chunks": "grad_chunking",
    "wrap_model_provider": "model_provider",
    "apply_freeze_rules": "model_provider",
}

__all__ = sorted(_LAZY_EXPORTS)


def __getattr__(name):
    submodule = _LAZY_EXPORTS.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{submodule}")
    return getattr(module, name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
