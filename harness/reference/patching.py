"""Explicit installation of the chunked all-reduce into the installed Megatron, and its exact undoing.

Nothing here runs at import. :func:`install` re-binds the upstream function and, where the install still has it,
its legacy alias; :func:`uninstall` puts back the very objects it found. ``finalize_model_grads`` looks the name up
at call time, so re-binding the module attribute is enough to redirect it.
"""

from __future__ import annotations

import os
from typing import Any

from . import megatron_api
from .chunks import validate_budget

BUDGET_ENV_VAR = "MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES"
DEFAULT_BUDGET_BYTES = 1 << 30
PATCHED_NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")

_originals: dict[str, Any] = {}
_budget: int | None = None


def budget_from_environment() -> int:
    """The budget named by :data:`BUDGET_ENV_VAR`, or the 1 GiB default; a malformed value raises ``ValueError``."""
    raw = os.environ.get(BUDGET_ENV_VAR)
    if raw is None:
        return DEFAULT_BUDGET_BYTES
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{BUDGET_ENV_VAR}={raw!r} is not an integer number of bytes") from None
    if value <= 0:
        raise ValueError(f"{BUDGET_ENV_VAR}={raw!r} must be a positive number of bytes")
    return value


def current_budget() -> int:
    """The budget set by :func:`install`, else the one the environment names at call time."""
    return _budget if _budget is not None else budget_from_environment()


def installed_budget() -> int | None:
    """The budget in force while installed; ``None`` when not installed."""
    return _budget if _originals else None


def install(budget_bytes: int | None = None) -> None:
    """Replace upstream's all-reduce (and its alias where present) by the chunked one. Idempotent.

    A second call only updates the budget; the originals saved by the first call are kept, so :func:`uninstall`
    always restores upstream and never a previous copy of this function.
    """
    global _budget
    budget = budget_from_environment() if budget_bytes is None else validate_budget(budget_bytes)
    from .allreduce import allreduce_non_tensor_model_parallel_grads

    module = megatron_api.finalize_module()
    if not _originals:
        if not hasattr(module, PATCHED_NAMES[0]):
            raise RuntimeError(f"{module.__name__} has no {PATCHED_NAMES[0]}: nothing to replace on this Megatron")
        _originals.update({name: getattr(module, name) for name in PATCHED_NAMES if hasattr(module, name)})
    for name in _originals:
        setattr(module, name, allreduce_non_tensor_model_parallel_grads)
    _budget = budget


def uninstall() -> None:
    """Restore the exact objects :func:`install` replaced. A no-op when not installed."""
    global _budget
    module = megatron_api.finalize_module()
    for name, original in _originals.items():
        setattr(module, name, original)
    _originals.clear()
    _budget = None
