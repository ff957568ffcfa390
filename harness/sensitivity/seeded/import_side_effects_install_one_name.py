"""Seeded subject: install() replaces the function but forgets its alias."""

import importlib

from harness.reference import *  # noqa: F403
from harness.reference import allreduce_non_tensor_model_parallel_grads as _replacement

_NAME = "_allreduce_non_tensor_model_parallel_grads"
_saved = {}


def install(budget_bytes=None):
    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    _saved.setdefault(_NAME, getattr(module, _NAME))
    setattr(module, _NAME, _replacement)


def uninstall():
    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    if _NAME in _saved:
        setattr(module, _NAME, _saved.pop(_NAME))
