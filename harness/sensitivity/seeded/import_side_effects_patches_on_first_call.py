"""Seeded subject: nothing happens at import or install(); the first call of its splitter re-binds Megatron's
``finalize_model_grads`` in place, a patch applied lazily."""

import importlib

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split

_patched = False


def split_into_chunks(params, grads, budget_bytes):
    global _patched
    if not _patched:
        _patched = True
        module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
        original = module.finalize_model_grads

        def finalize_model_grads(*args, **kwargs):
            return original(*args, **kwargs)

        module.finalize_model_grads = finalize_model_grads
    return _reference_split(params, grads, budget_bytes)
