"""Megatron-Core adapter for kestrel.

Importing this package has no side effects: it does not import torch or
Megatron, does not patch anything and does not touch global state. Public
names are resolved lazily (PEP 562) from the submodules on first attribute
access:

* :mod:`kestrel.backends.megatron.grad_allreduce_patch`
    - ``apply_chunked_grad_allreduce_patch(*, budget_bytes=None)``
    - ``undo_chunked_grad_allreduce_patch()``
    - ``is_chunked_grad_allreduce_patch_applied()``
    - ``split_into_byte_budget_chunks(tensors, budget_bytes, element_size=None)``
    - ``chunked_allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None)``
* :mod:`kestrel.backends.megatron.model_provider`
    - ``wrap_model_provider(inner_provider, args)``
    - ``apply_freeze_rules(module, freeze_patterns, trainable_patterns)``
"""

import importlib

_LAZY_EXPORTS = {
    "apply_chunked_grad_allreduce_patch": "grad_allreduce_patch",
    "undo_chunked_grad_allreduce_patch": "grad_allreduce_patch",
    "is_chunked_grad_allreduce_patch_applied": "grad_allreduce_patch",
    "split_into_byte_budget_chunks": "grad_allreduce_patch",
    "chunked_allreduce_non_tensor_model_parallel_grads": "grad_allreduce_patch",
    "DEFAULT_GRAD_ALLREDUCE_BUDGET_BYTES": "grad_allreduce_patch",
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
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
