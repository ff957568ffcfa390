"""A model-provider wrapper that survives Megatron's changing provider call shape and applies freeze rules.

Megatron's training loop calls the provider with keywords that differ between releases (``vp_stage``,
``add_encoder``/``add_decoder``, ``config``/``pg_collection``). A wrapper with a fixed signature breaks on the next
release; this one takes whatever the caller passes and forwards only what the wrapped provider can accept.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

ALWAYS_FORWARDED = ("pre_process", "post_process")


def accepted_keywords(func: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``func`` accepts; ``None`` when it takes ``**kwargs`` (it accepts any name)."""
    names: set[str] = set()
    for param in inspect.signature(func).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(param.name)
    return names


def freeze_by_patterns(model: Any, freeze: list[str] | None, train_only: list[str] | None) -> None:
    """Set ``requires_grad=False`` on parameters matching ``freeze``, and on all not matching ``train_only``."""
    freeze_res = [re.compile(p) for p in freeze or []]
    train_res = [re.compile(p) for p in train_only or []]
    if not freeze_res and not train_res:
        return
    for name, param in model.named_parameters():
        if any(r.search(name) for r in freeze_res):
            param.requires_grad = False
        elif train_res and not any(r.search(name) for r in train_res):
            param.requires_grad = False


def wrap_model_provider(provider: Callable[..., Any], args: Any) -> Callable[..., Any]:
    """Wrap ``provider`` so every Megatron call shape reaches it, then apply ``args``' freeze rules to its model.

    ``args.freeze_patterns`` (regexes of parameter names to freeze) and ``args.train_only_patterns`` (regexes of the
    only parameters to train) are read when the model is built, so the wrapper can be made before args are final.
    """
    accepted = accepted_keywords(provider)

    def wrapped_provider(pre_process: bool, post_process: bool, **kwargs: Any) -> Any:
        forwarded = {k: v for k, v in kwargs.items() if accepted is None or k in accepted}
        model = provider(pre_process=pre_process, post_process=post_process, **forwarded)
        freeze_by_patterns(model, getattr(args, "freeze_patterns", None), getattr(args, "train_only_patterns", None))
        return model

    wrapped_provider.__name__ = getattr(provider, "__name__", "wrapped_provider")
    wrapped_provider.__doc__ = provider.__doc__
    return wrapped_provider
