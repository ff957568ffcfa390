"""Megatron-Core backend adapter for grebe.

Importing this package has no side effects. In particular it does NOT import
``grebe.backends.megatron.allreduce_patch``: importing that module is what
replaces Megatron's ``_allreduce_non_tensor_model_parallel_grads`` with the
chunked version, and only the training entry point should do it.

Modules:
  * ``grad_chunking``   -- ``split_tensors_by_bytes``: split tensors into
                           byte-budgeted chunks (torch-only, no Megatron).
  * ``model_provider``  -- ``wrap_model_provider``: model-provider wrapper that
                           applies grebe's freeze rules (stdlib only).
  * ``allreduce_patch`` -- the chunked all-reduce; applied on import.
"""

__all__ = ["wrap_model_provider", "split_tensors_by_bytes"]

_LAZY = {
    "wrap_model_provider": "model_provider",
    "split_tensors_by_bytes": "grad_chunking",
}


def __getattr__(name):
    # Lazy re-exports (PEP 562): nothing is imported until first access.
    # ``allreduce_patch`` is deliberately not reachable from here.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
