"""Model-provider wrapper that applies osprey's parameter freeze rules.

Megatron builds each model chunk by calling a user "model provider"
(``megatron.training.training.get_model`` calls
``model_provider_func(pre_process=..., post_process=..., [vp_stage=...,]
[config=..., pg_collection=...])``; the exact keywords depend on the release).
:func:`wrap_model_provider` returns a provider that forwards whatever it is
called with to osprey's inner provider and then freezes parameters according
to two rule lists read from osprey's ``args``:

* ``args.osprey_freeze``: regex patterns; a parameter whose name matches any
  of them gets ``requires_grad = False``.
* ``args.osprey_train_only``: regex patterns; every parameter whose name
  matches none of them gets ``requires_grad = False``.

Patterns are matched with :func:`re.fullmatch` against the names reported by
``named_parameters()`` of the module returned by the inner provider (i.e.
before Megatron wraps it in Float16Module / DDP, so without a ``module.``
prefix). Rules only ever freeze; they never set ``requires_grad = True``.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Callable, Iterable, List, Optional, Pattern, Sequence, Tuple, Union

logger = logging.getLogger(__name__)

__all__ = ["FREEZE_ARG", "TRAIN_ONLY_ARG", "apply_freeze_rules", "wrap_model_provider"]

#: ``args`` attribute holding the patterns of parameters to freeze.
FREEZE_ARG = "osprey_freeze"
#: ``args`` attribute holding the patterns of the only parameters to train.
TRAIN_ONLY_ARG = "osprey_train_only"

PatternsLike = Union[None, str, Pattern[str], Iterable[Union[str, Pattern[str]]]]


def _compile(patterns: PatternsLike, what: str) -> Optional[List[Pattern[str]]]:
    """None / empty -> None (no rule). A single string is one pattern."""
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled: List[Pattern[str]] = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            compiled.append(pattern)
        elif isinstance(pattern, str):
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"invalid regex in {what}: {pattern!r}: {exc}") from exc
        else:
            raise TypeError(f"{what} entries must be str or re.Pattern, got {type(pattern).__name__}")
    return compiled or None


def _matches(names: Sequence[str], patterns: Sequence[Pattern[str]]) -> bool:
    return any(p.fullmatch(name) for name in names for p in patterns)


def apply_freeze_rules(
    model: Any,
    freeze: PatternsLike = None,
    train_only: PatternsLike = None,
) -> Tuple[int, int]:
    """Freeze parameters of ``model`` (a module or a list of modules) by name.

    A parameter is frozen (``requires_grad = False``) if any of its names
    fullmatches a ``freeze`` pattern, or if ``train_only`` is given and none of
    its names fullmatches a ``train_only`` pattern. A parameter registered under
    several names (shared/tied weights) is checked against all of them.
    ``None`` or an empty list means "no rule". Nothing is ever unfrozen.

    Returns ``(newly_frozen, still_trainable)`` parameter counts.
    """
    freeze_patterns = _compile(freeze, FREEZE_ARG)
    train_only_patterns = _compile(train_only, TRAIN_ONLY_ARG)

    modules = model if isinstance(model, (list, tuple)) else [model]
    newly_frozen = 0
    trainable = 0
    for module in modules:
        names_by_param = {}
        params = {}
        for name, param in module.named_parameters(remove_duplicate=False):
            names_by_param.setdefault(id(param), []).append(name)
            params[id(param)] = param
        for key, param in params.items():
            names = names_by_param[key]
            freeze_it = False
            if freeze_patterns is not None and _matches(names, freeze_patterns):
                freeze_it = True
            elif train_only_patterns is not None and not _matches(names, train_only_patterns):
                freeze_it = True
            if freeze_it:
                if param.requires_grad:
                    param.requires_grad_(False)
                    newly_frozen += 1
            elif param.requires_grad:
                trainable += 1
    return newly_frozen, trainable


def wrap_model_provider(inner_provider: Callable[..., Any], args: Any) -> Callable[..., Any]:
    """Return a model provider for Megatron that applies osprey's freeze rules.

    The returned callable forwards ``*args, **kwargs`` unchanged to
    ``inner_provider``, then applies :func:`apply_freeze_rules` to the returned
    model using ``getattr(args, "osprey_freeze", None)`` and
    ``getattr(args, "osprey_train_only", None)``. The rule lists are read from
    ``args`` each time the provider is called. Returns the inner provider's
    model object unchanged otherwise.
    """
    if not callable(inner_provider):
        raise TypeError("inner_provider must be callable")
    framework_args = args

    @functools.wraps(inner_provider)
    def osprey_model_provider(*provider_args, **provider_kwargs):
        model = inner_provider(*provider_args, **provider_kwargs)
        freeze = getattr(framework_args, FREEZE_ARG, None)
        train_only = getattr(framework_args, TRAIN_ONLY_ARG, None)
        if _compile(freeze, FREEZE_ARG) is None and _compile(train_only, TRAIN_ONLY_ARG) is None:
            return model
        newly_frozen, trainable = apply_freeze_rules(model, freeze=freeze, train_only=train_only)
        logger.info(
            "osprey: freeze rules froze %d parameter tensors, %d remain trainable",
            newly_frozen,
            trainable,
        )
        return model

    return osprey_model_provider
