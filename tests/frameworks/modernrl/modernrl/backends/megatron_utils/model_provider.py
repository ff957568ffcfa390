"""Model provider wrapper: applies modernrl's freeze rules and follows Megatron's provider call shape.

Megatron's ``get_model`` calls the provider with keywords that change between releases (``vp_stage`` from 0.13,
``config`` and ``pg_collection`` from 0.16). The wrapper takes whatever the caller passes and forwards the keywords
the wrapped provider accepts by name (every one of them when it takes ``**kwargs``).

Freeze rules, read from ``args`` each time a model is built:

* ``only_train_params_name_list`` -- regexes; when non-empty, a parameter matching none of them is frozen;
* ``freeze_params_name_list`` -- regexes; a parameter matching one of them is frozen.

The wrapper only ever freezes: it never sets ``requires_grad=True``, so wrappers stack (the union is frozen).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from modernrl.utils.logging_utils import get_logger

logger = get_logger(__name__)

_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _keywords_accepted(provider: Callable[..., Any]) -> frozenset[str] | None:
    """Names ``provider`` takes by keyword; ``None`` when it takes ``**kwargs``."""
    parameters = inspect.signature(provider).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind in _BY_NAME)


def _compiled(patterns: Any) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in patterns or ()]


def apply_freeze_rules(model: Any, args: Any) -> int:
    """Freeze ``model``'s parameters by ``args``' rules; returns how many parameters it froze."""
    train_only = _compiled(getattr(args, "only_train_params_name_list", None))
    freeze = _compiled(getattr(args, "freeze_params_name_list", None))
    if not train_only and not freeze:
        return 0
    frozen = 0
    for module in model if isinstance(model, list | tuple) else (model,):
        for name, param in module.named_parameters():
            if any(r.search(name) for r in freeze) or (train_only and not any(r.search(name) for r in train_only)):
                if param.requires_grad:
                    frozen += 1
                param.requires_grad = False
    return frozen


def wrap_model_provider_with_freeze(provider: Callable[..., Any], args: Any) -> Callable[..., Any]:
    """A provider for Megatron's ``get_model`` that calls ``provider`` and applies ``args``' freeze rules."""
    accepted = _keywords_accepted(provider)

    def wrapped(pre_process: bool = True, post_process: bool = True, **kwargs: Any) -> Any:
        if accepted is not None:
            kwargs = {key: value for key, value in kwargs.items() if key in accepted}
        model = provider(pre_process=pre_process, post_process=post_process, **kwargs)
        frozen = apply_freeze_rules(model, args)
        if frozen:
            logger.debug("froze %d parameters", frozen)
        return model

    wrapped.__name__ = getattr(provider, "__name__", "wrapped_model_provider")
    wrapped.__qualname__ = wrapped.__name__
    wrapped.__doc__ = getattr(provider, "__doc__", None)
    return wrapped
