"""Model-provider wrapper that applies plover's parameter freeze rules.

Megatron's ``get_model`` calls the provider once per model chunk, e.g.
``provider(pre_process=..., post_process=...)`` plus ``vp_stage=...`` with
virtual pipeline parallelism, and in newer ``megatron.training`` releases also
``config=...`` and ``pg_collection=...``. The wrapper forwards whatever it is
called with to the inner provider unchanged.
"""

import functools
import logging
import re
from typing import Any, Callable, Iterable, List, Optional

import torch

logger = logging.getLogger(__name__)

#: ``args`` attribute: regexes; parameters whose name matches any are frozen.
FREEZE_PATTERNS_ATTR = "freeze_patterns"
#: ``args`` attribute: regexes; only parameters whose name matches one stay trainable.
UNFREEZE_ONLY_PATTERNS_ATTR = "unfreeze_only_patterns"


def _compile(patterns: Any) -> Optional[List["re.Pattern"]]:
    """None / empty -> None (no rule); a single string counts as a one-item list."""
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled = [p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns]
    return compiled or None


def _modules(model: Any) -> Iterable[torch.nn.Module]:
    if isinstance(model, (list, tuple)):
        return [m for m in model if m is not None]
    return [model]


def apply_freeze_rules(model: Any, args: Any) -> Any:
    """Apply ``args.freeze_patterns`` / ``args.unfreeze_only_patterns`` to ``model``.

    ``model`` is a module or a list/tuple of modules. Parameter names are those
    of ``named_parameters()`` on each module, matched with ``re.search``. A
    parameter is set to ``requires_grad=False`` when it matches any freeze
    pattern, or when an unfreeze-only list is given and it matches none of it.
    No parameter is ever set to ``requires_grad=True``. Either attribute may be
    missing or None (an empty list counts as no rule). Returns ``model``.
    """
    freeze = _compile(getattr(args, FREEZE_PATTERNS_ATTR, None))
    only = _compile(getattr(args, UNFREEZE_ONLY_PATTERNS_ATTR, None))
    if freeze is None and only is None:
        return model

    frozen = 0
    total = 0
    for module in _modules(model):
        for name, param in module.named_parameters():
            total += 1
            if freeze is not None and any(p.search(name) for p in freeze):
                hit = True
            elif only is not None and not any(p.search(name) for p in only):
                hit = True
            else:
                hit = False
            if hit:
                param.requires_grad_(False)
                frozen += 1
    logger.info("plover: freeze rules froze %d of %d parameters", frozen, total)
    return model


def wrap_model_provider(inner_provider: Callable[..., Any], args: Any) -> Callable[..., Any]:
    """Return a provider for Megatron that builds via ``inner_provider`` then freezes.

    The returned callable takes ``*args, **kwargs``, passes them unchanged to
    ``inner_provider``, applies :func:`apply_freeze_rules` with the framework
    ``args`` (read when each chunk is built) and returns the model.
    """

    @functools.wraps(inner_provider)
    def model_provider(*provider_args, **provider_kwargs):
        model = inner_provider(*provider_args, **provider_kwargs)
        apply_freeze_rules(model, args)
        return model

    return model_provider
