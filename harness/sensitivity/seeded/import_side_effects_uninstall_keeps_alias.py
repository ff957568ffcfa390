"""Seeded subject: uninstall() restores the function but leaves the alias patched."""

import importlib

from harness.reference import *  # noqa: F403
from harness.reference import install as _reference_install
from harness.reference import uninstall as _reference_uninstall

_ALIAS = "_allreduce_layernorm_grads"


def install(budget_bytes=None):
    _reference_install(budget_bytes)


def uninstall():
    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    patched = getattr(module, _ALIAS)
    _reference_uninstall()
    setattr(module, _ALIAS, patched)
