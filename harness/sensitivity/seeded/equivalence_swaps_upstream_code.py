"""Seeded subject: at import it swaps the ``__code__`` of Megatron's ``_allreduce_non_tensor_model_parallel_grads`` for
code that forwards to the reference subject's chunked all-reduce. Every name still binds the same function object,
so a gate that checks identity only, and calls that object as "upstream", compares the subject with itself."""

import importlib

from harness.reference import *  # noqa: F403


def _forward(*args, **kwargs):
    # Runs with Megatron's module globals: everything it needs is imported here.
    import sys

    return sys.modules["harness.reference.allreduce"].allreduce_non_tensor_model_parallel_grads(*args, **kwargs)


_module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
_module._allreduce_non_tensor_model_parallel_grads.__code__ = _forward.__code__
