"""Explicit installation of the chunked all-reduce into the installed Megatron, and its exact undoing.

Nothing here runs at import. :func:`install` re-binds the upstream function and, where the install still has it,
its legacy alias; :func:`uninstall` puts back the very objects it found. ``finalize_model_grads`` looks the name up
at call time, so re-binding the module attribute is enough to redirect it.
"""

from __future__ import annotations

from typing import Any

from . import budget, megatron_api
from .allreduce import allreduce_non_tensor_model_parallel_grads
from .budget import budget_from_environment
from .chunks import validate_budget

PATCHED_NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")

_originals: dict[str, Any] = {}


def installed_budget() -> int | None:
    """The budget in force while installed; ``None`` when not installed."""
    return budget.installed() if _originals else None


def install(budget_bytes: int | None = None) -> None:
    """Replace upstream's all-reduce (and its alias where present) by the chunked one. Idempotent.

    A second call only updates the budget; the originals saved by the first call are kept, so :func:`uninstall`
    always restores upstream and never a previous copy of this function.
    """
    chosen = budget_from_environment() if budget_bytes is None else validate_budget(budget_bytes)
    module = megatron_api.finalize_module()
    if not _originals:
        if not hasattr(module, PATCHED_NAMES[0]):
            raise RuntimeError(f"{module.__name__} has no {PATCHED_NAMES[0]}: nothing to replace on this Megatron")
        _originals.update({name: getattr(module, name) for name in PATCHED_NAMES if hasattr(module, name)})
    for name in _originals:
        setattr(module, name, allreduce_non_tensor_model_parallel_grads)
    budget.set_installed(chosen)


def uninstall() -> None:
    """Restore the exact objects :func:`install` replaced. A no-op when not installed."""
    module = megatron_api.finalize_module()
    for name, original in _originals.items():
        setattr(module, name, original)
    _originals.clear()
    budget.set_installed(None)
