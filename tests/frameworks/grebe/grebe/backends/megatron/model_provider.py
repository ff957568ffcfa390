"""Model-provider wrapper that applies grebe's parameter freeze rules.

Megatron's ``get_model`` calls the model provider with keyword arguments only
(``pre_process``, ``post_process``, ``vp_stage`` with virtual pipeline
parallelism and, in newer releases, ``config`` and ``pg_collection``). grebe's
inner providers declare explicit parameters, so the wrapper forwards only the
keywords the inner provider's signature names.

Freeze rules are read from the framework ``args`` namespace when the provider
is called:

* ``args.grebe_freeze_params``: regex patterns; a parameter whose name matches
  any of them (``re.search``) gets ``requires_grad = False``.
* ``args.grebe_train_params``: regex patterns; a parameter whose name matches
  none of them (``re.search``) gets ``requires_grad = False``.

A missing attribute, ``None`` or an empty list means "no rule". The rules only
ever freeze; they never set ``requires_grad = True``.

This module imports only the standard library and has no side effects.
"""

import functools
import inspect
import logging
import re
from typing import Any, Callable, Iterable, List, Optional, Pattern

__all__ = ["wrap_model_provider", "apply_freeze_rules", "FREEZE_ATTR", "TRAIN_ATTR"]

logger = logging.getLogger(__name__)

FREEZE_ATTR = "grebe_freeze_params"
TRAIN_ATTR = "grebe_train_params"


def _compile_patterns(patterns: Any) -> Optional[List[Pattern]]:
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled = [p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns]
    if not compiled:
        return None
    return compiled


def _iter_modules(model: Any) -> Iterable[Any]:
    if isinstance(model, (list, tuple)):
        for m in model:
            yield from _iter_modules(m)
    elif model is not None:
        yield model


def apply_freeze_rules(model: Any, freeze_patterns=None, train_patterns=None) -> int:
    """Set ``requires_grad=False`` on parameters of ``model`` per the rules.

    ``model`` is a ``torch.nn.Module`` or a list/tuple of them. Parameter names
    are those of ``named_parameters()`` on each module. Returns the number of
    parameters frozen by the rules.
    """
    freeze = _compile_patterns(freeze_patterns)
    train = _compile_patterns(train_patterns)
    if freeze is None and train is None:
        return 0

    frozen = 0
    for module in _iter_modules(model):
        for name, param in module.named_parameters():
            freeze_it = False
            if freeze is not None and any(p.search(name) for p in freeze):
                freeze_it = True
            if train is not None and not any(p.search(name) for p in train):
                freeze_it = True
            if freeze_it:
                if param.requires_grad:
                    frozen += 1
                param.requires_grad = False
    return frozen


def _accepted_kwargs(func: Callable):
    """Return (names accepted as keywords, accepts **kwargs)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        # No introspectable signature: forward everything.
        return set(), True
    names = set()
    var_kw = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(p.name)
    return names, var_kw


def wrap_model_provider(inner_provider: Callable, args: Any) -> Callable:
    """Return a model provider to hand to Megatron.

    The returned provider calls ``inner_provider`` with the positional
    arguments it received and with only those keyword arguments that
    ``inner_provider``'s signature names (all of them if it takes
    ``**kwargs``), then applies the freeze rules from ``args`` (see module
    docstring) to the model it returns, and returns that model.
    """
    names, var_kw = _accepted_kwargs(inner_provider)

    @functools.wraps(inner_provider)
    def provider(*pos_args, **kwargs):
        if not var_kw:
            dropped = [k for k in kwargs if k not in names]
            if dropped:
                logger.debug(
                    "grebe model provider: not passing %s to %s",
                    dropped,
                    getattr(inner_provider, "__qualname__", inner_provider),
                )
            kwargs = {k: v for k, v in kwargs.items() if k in names}
        model = inner_provider(*pos_args, **kwargs)
        frozen = apply_freeze_rules(
            model,
            freeze_patterns=getattr(args, FREEZE_ATTR, None),
            train_patterns=getattr(args, TRAIN_ATTR, None),
        )
        if frozen:
            logger.info("grebe freeze rules: froze %d parameter tensors", frozen)
        return model

    return provider
