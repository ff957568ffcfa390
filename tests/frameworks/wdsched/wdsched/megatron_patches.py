"""Weight-decay hold for Megatron-Core's ``OptimizerParamScheduler``.

Written against megatron-core 0.15.3, where the scheduler computes one weight
decay per step (``OptimizerParamScheduler.get_wd(self) -> float``) and
``OptimizerParamScheduler.step`` writes it into every param group.

RL fine-tuning from a pretrained checkpoint: wdsched keeps the weight decay at
``start_wd`` for the first ``hold_steps`` scheduler steps (while the policy is
still moving away from the reference model), and only then lets Megatron's own
increment schedule (``wd_incr_style``: constant / linear / cosine over
``wd_incr_steps``) take over. After the hold, the value is exactly Megatron's.

``apply_patches()`` replaces ``OptimizerParamScheduler.get_wd`` on the class
with :func:`wdsched_get_wd`; applying twice is the same as applying once.
``remove_patches()`` puts Megatron's original function object back.
Megatron is imported only when ``apply_patches()`` / ``remove_patches()`` run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = [
    "DEFAULT_HOLD_STEPS",
    "apply_patches",
    "patches_applied",
    "remove_patches",
    "wdsched_get_wd",
]

# Scheduler steps during which the weight decay is held at ``start_wd``.
DEFAULT_HOLD_STEPS: int = 100
_hold_steps: int = DEFAULT_HOLD_STEPS

# Megatron's own ``OptimizerParamScheduler.get_wd``, captured by apply_patches().
_orig_get_wd: Callable | None = None
_lock = threading.Lock()


def wdsched_get_wd(self) -> float:
    """wdsched's ``OptimizerParamScheduler.get_wd`` (same signature as 0.15.3's).

    Holds ``start_wd`` for the first ``_hold_steps`` steps, then defers to
    Megatron's original weight-decay increment function.
    """
    if self.num_steps < _hold_steps:
        return self.start_wd
    return _orig_get_wd(self)


def apply_patches(hold_steps: int | None = None) -> None:
    """Replace ``OptimizerParamScheduler.get_wd`` with :func:`wdsched_get_wd`.

    Idempotent: a second call only updates ``hold_steps`` (when given) and
    never wraps the replacement in itself.
    """
    global _orig_get_wd, _hold_steps
    if hold_steps is not None:
        if isinstance(hold_steps, bool) or not isinstance(hold_steps, int) or hold_steps < 0:
            raise ValueError(f"hold_steps must be a non-negative int, got {hold_steps!r}")

    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    with _lock:
        if hold_steps is not None:
            _hold_steps = hold_steps
        if OptimizerParamScheduler.__dict__.get("get_wd") is wdsched_get_wd:
            return
        _orig_get_wd = OptimizerParamScheduler.get_wd
        OptimizerParamScheduler.get_wd = wdsched_get_wd


def remove_patches() -> None:
    """Put Megatron's original ``OptimizerParamScheduler.get_wd`` back (no-op if not applied)."""
    global _orig_get_wd, _hold_steps
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    with _lock:
        if OptimizerParamScheduler.__dict__.get("get_wd") is not wdsched_get_wd:
            return
        OptimizerParamScheduler.get_wd = _orig_get_wd
        _orig_get_wd = None
        _hold_steps = DEFAULT_HOLD_STEPS


def patches_applied() -> bool:
    """Whether ``OptimizerParamScheduler.get_wd`` is wdsched's replacement."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    return OptimizerParamScheduler.__dict__.get("get_wd") is wdsched_get_wd
