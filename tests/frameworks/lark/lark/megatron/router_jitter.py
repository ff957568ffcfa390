"""Deterministic multiplicative jitter on MoE router logits (training only).

``enable_router_jitter(eps)`` replaces the gating step of Megatron-Core's
``TopKRouter`` (``megatron.core.transformer.moe.router.TopKRouter.gating``)
with :func:`_lark_jittered_gating`.  That function runs Megatron's own gating
(the function that was in effect when the patch was applied) and, while
``router.training`` is true and the module-level ``_jitter_eps`` is > 0,
returns ``logits * (1 + eps * r)`` with ``r`` in ``[-1, 1)``.

``r`` is a pure function of (element position in the logits tensor, router
layer number, ``JITTER_SEED``): no RNG state is read or advanced, so the jitter
is identical across runs, in activation recomputation and under CUDA graphs.

``disable_router_jitter()`` restores ``TopKRouter`` exactly: in megatron-core
0.13 - 0.19 ``TopKRouter`` does not define ``gating`` itself (it inherits
``Router.gating``), so undo deletes the class attribute again instead of
assigning anything.
"""

from __future__ import annotations

import inspect
import math
import threading
from typing import Any, Callable, Optional

import torch

__all__ = [
    "enable_router_jitter",
    "disable_router_jitter",
    "is_router_jitter_enabled",
    "get_router_jitter_eps",
    "JITTER_SEED",
]

# Module-level setting read by the replacement at every call.  0.0 means "no jitter".
_jitter_eps: float = 0.0

# Base seed of the deterministic jitter pattern (mixed with the router's layer number).
JITTER_SEED: int = 0x1A4C5EED

_MISSING = object()
_lock = threading.Lock()

# Patch bookkeeping (filled by enable_router_jitter, cleared by disable_router_jitter).
_patched_cls: Optional[type] = None
_saved_own_attr: Any = _MISSING  # TopKRouter.__dict__['gating'] before patching, or _MISSING
_megatron_gating: Optional[Callable] = None  # Megatron's gating function we delegate to

_GATING_ATTR = "gating"
_SUPPORTED_MIN = (0, 13)


def _megatron_version() -> str:
    try:
        from megatron.core import package_info

        return str(package_info.__version__)
    except Exception:  # pragma: no cover - very old / unusual installs
        return "unknown"


def _jitter_factor(logits: torch.Tensor, eps: float, seed: int) -> torch.Tensor:
    """Return ``1 + eps * r`` shaped like ``logits``, ``r`` a hash of the element index."""
    idx = torch.arange(logits.numel(), device=logits.device, dtype=torch.int64)
    mask = 0xFFFFFFFF
    x = (idx * 0x9E3779B1 + seed) & mask
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & mask
    x = x ^ (x >> 16)
    x = (x * 0x045D9F3B) & mask
    x = x ^ (x >> 16)
    u = (x >> 8).to(torch.float32) * (1.0 / (1 << 24))  # exact, in [0, 1)
    factor = 1.0 + eps * (2.0 * u - 1.0)
    return factor.view(logits.shape).to(dtype=logits.dtype)


def _lark_jittered_gating(self, input: torch.Tensor) -> torch.Tensor:
    """lark's replacement for ``TopKRouter.gating`` (same signature and return value).

    Megatron calls ``self.gating(input)`` and expects the logits tensor back
    (``TopKRouter.forward`` in all versions; ``InferenceTopKRouter._forward`` in 0.19).
    """
    logits = _megatron_gating(self, input)
    eps = _jitter_eps
    if eps > 0.0 and self.training:
        layer = getattr(self, "layer_number", None) or 0
        seed = (JITTER_SEED + 1000003 * int(layer)) & 0xFFFFFFFF
        logits = logits * _jitter_factor(logits, eps, seed)
    return logits


def _resolve_router_cls() -> type:
    try:
        from megatron.core.transformer.moe import router as router_mod
    except Exception as exc:
        raise RuntimeError(
            "lark router jitter needs megatron-core (supported: 0.13 - 0.19); could not "
            f"import megatron.core.transformer.moe.router: {exc!r}"
        ) from exc

    version = _megatron_version()
    cls = getattr(router_mod, "TopKRouter", None)
    if cls is None:
        raise RuntimeError(
            f"lark router jitter: megatron-core {version} has no "
            "megatron.core.transformer.moe.router.TopKRouter"
        )
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        parts = None
    if parts is not None and parts < _SUPPORTED_MIN:
        raise RuntimeError(
            f"lark router jitter supports megatron-core >= 0.13; found {version}"
        )

    current = inspect.getattr_static(cls, _GATING_ATTR, None)
    if not inspect.isfunction(current):
        raise RuntimeError(
            f"lark router jitter: megatron-core {version} TopKRouter.gating is "
            f"{type(current).__name__}, expected a plain function gating(self, input)"
        )
    params = list(inspect.signature(current).parameters)
    if params != ["self", "input"]:
        raise RuntimeError(
            f"lark router jitter: megatron-core {version} TopKRouter.gating has signature "
            f"({', '.join(params)}); lark supports only gating(self, input)"
        )
    return cls


def enable_router_jitter(eps: float) -> None:
    """Patch ``TopKRouter.gating`` and set the jitter magnitude to ``eps``.

    Calling it again while enabled only updates ``eps`` (the patch is not stacked).
    """
    global _jitter_eps, _patched_cls, _saved_own_attr, _megatron_gating

    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    eps = float(eps)
    if not math.isfinite(eps) or not (0.0 <= eps < 1.0):
        raise ValueError(f"eps must be finite and in [0, 1), got {eps}")

    with _lock:
        if _patched_cls is not None:
            _jitter_eps = eps
            return
        cls = _resolve_router_cls()
        original = getattr(cls, _GATING_ATTR)  # plain function (class attribute access)
        if original is _lark_jittered_gating:
            raise RuntimeError("lark router jitter: TopKRouter.gating is already lark's")
        _saved_own_attr = cls.__dict__.get(_GATING_ATTR, _MISSING)
        _megatron_gating = original
        _patched_cls = cls
        _jitter_eps = eps
        setattr(cls, _GATING_ATTR, _lark_jittered_gating)


def disable_router_jitter() -> None:
    """Undo :func:`enable_router_jitter`, restoring ``TopKRouter`` exactly. No-op if not enabled."""
    global _jitter_eps, _patched_cls, _saved_own_attr, _megatron_gating

    with _lock:
        cls = _patched_cls
        if cls is None:
            _jitter_eps = 0.0
            return
        if cls.__dict__.get(_GATING_ATTR, _MISSING) is not _lark_jittered_gating:
            raise RuntimeError(
                "lark router jitter: TopKRouter.gating was replaced by someone else after "
                "lark patched it; refusing to overwrite it"
            )
        if _saved_own_attr is _MISSING:
            delattr(cls, _GATING_ATTR)
        else:
            setattr(cls, _GATING_ATTR, _saved_own_attr)
        _patched_cls = None
        _saved_own_attr = _MISSING
        _megatron_gating = None
        _jitter_eps = 0.0


def is_router_jitter_enabled() -> bool:
    return _patched_cls is not None


def get_router_jitter_eps() -> float:
    return _jitter_eps
