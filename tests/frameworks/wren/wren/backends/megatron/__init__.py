"""Megatron-Core adapter for wren.

Importing this package has no side effects: it does not import Megatron or torch,
does not read the environment and does not patch anything. The public names below
are resolved lazily from their submodules on first attribute access; nothing is
patched until :func:`apply_allreduce_patch` is called explicitly.

Submodules:

* ``wren.backends.megatron.grad_allreduce`` -- chunked replacement for Megatron's
  ``_allreduce_non_tensor_model_parallel_grads`` plus apply/undo functions.
* ``wren.backends.megatron.model_provider`` -- model-provider wrapper that applies
  wren's parameter freeze rules.
"""

import importlib

_LAZY_ATTRS = {
    "apply_allreduce_patch": "grad_allreduce",
    "undo_allreduce_patch": "grad_allreduce",
    "is_allreduce_patch_applied": "grad_allreduce",
    "split_tensors_by_bytes": "grad_allreduce",
    "chunked_allreduce_non_tensor_model_parallel_grads": "grad_allreduce",
    "wrap_model_provider": "model_provider",
    "apply_freeze_rules": "model_provider",
}

__all__ = sorted(_LAZY_ATTRS)


def __getattr__(name):
    submodule = _LAZY_ATTRS.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{submodule}")
    return getattr(module, name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY_ATTRS))
