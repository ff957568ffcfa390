"""Model-provider wrapper that freezes parameters by regex rules."""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, List, Sequence

__all__ = ["wrap", "freeze_parameters", "FREEZE_ATTR", "TRAINABLE_ATTR"]

FREEZE_ATTR = "freeze_patterns"
TRAINABLE_ATTR = "trainable_patterns"


def _log():
    import logging

    return logging.getLogger("finch.mcore.provider")


def _patterns(args, attr: str) -> List["re.Pattern"]:
    value = getattr(args, attr, None)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [re.compile(p) for p in value if p]


def freeze_parameters(model, freeze: Sequence["re.Pattern"], trainable: Sequence["re.Pattern"]) -> int:
    """Set ``requires_grad=False`` on matching parameters; returns how many were frozen.

    A parameter is frozen when any of its names matches (``re.search``) a
    ``freeze`` pattern, or when ``trainable`` is non-empty and none of its names
    matches a ``trainable`` pattern.  Parameters are never unfrozen.  ``model`` is
    a module or a list/tuple of modules; names are those of ``named_parameters``
    of each module (all names of a shared parameter are considered).
    """
    modules = model if isinstance(model, (list, tuple)) else [model]
    names_of = {}
    params = {}
    for module in modules:
        for name, p in module.named_parameters(remove_duplicate=False):
            names_of.setdefault(id(p), []).append(name)
            params[id(p)] = p
    frozen = 0
    for key, p in params.items():
        names = names_of[key]
        hit_freeze = any(r.search(n) for r in freeze for n in names)
        keep = (not trainable) or any(r.search(n) for r in trainable for n in names)
        if (hit_freeze or not keep) and p.requires_grad:
            p.requires_grad_(False)
            frozen += 1
    return frozen


def wrap(provider: Callable[..., Any], args) -> Callable[..., Any]:
    """Return a provider that calls ``provider(*a, **kw)`` unchanged, then freezes.

    Rules come from ``args.freeze_patterns`` (regexes to freeze) and
    ``args.trainable_patterns`` (if non-empty, only matching params stay
    trainable); each a list of strings (a single string is one pattern),
    missing/None meaning none.  They are read and compiled when ``wrap`` is
    called.  The returned callable keeps the inner provider's metadata and
    signature (``functools.wraps``), and returns the inner provider's result
    (same object).
    """
    freeze = _patterns(args, FREEZE_ATTR)
    trainable = _patterns(args, TRAINABLE_ATTR)

    @functools.wraps(provider)
    def finch_provider(*a, **kw):
        model = provider(*a, **kw)
        if freeze or trainable:
            n = freeze_parameters(model, freeze, trainable)
            _log().info("finch: froze %d parameter tensors", n)
        return model

    finch_provider.finch_inner_provider = provider
    return finch_provider
