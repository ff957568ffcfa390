"""Model-provider wrapper that applies heron's freeze rules.

Megatron's ``get_model`` calls the model provider once per model chunk, with
keyword arguments that vary across releases (``pre_process``, ``post_process``,
``vp_stage`` and, in newer ``megatron/training``, ``config`` and
``pg_collection``). The wrapper forwards whatever it receives to the inner
provider unchanged, then applies the freeze rules read from ``args``:

* ``args.frozen_modules``: regex patterns; every parameter whose name matches
  one of them gets ``requires_grad=False``.
* ``args.train_only_modules``: regex patterns; every parameter whose name
  matches none of them gets ``requires_grad=False``.

Either attribute may be missing or None (no rule). Patterns are matched with
``re.match`` (anchored at the start of the name, not at the end) against the
names from ``model.named_parameters()`` of the module the inner provider
returns. Freeze rules only ever freeze: a parameter that is already frozen is
never unfrozen.
"""

import functools
import logging
import re
from typing import Any, Callable, Iterable, List, Optional, Pattern, Sequence, Tuple, Union

__all__ = ["wrap_model_provider", "apply_freeze_rules", "FROZEN_ATTR", "TRAIN_ONLY_ATTR"]

logger = logging.getLogger(__name__)

#: ``args`` attribute with the patterns of parameters to freeze.
FROZEN_ATTR = "frozen_modules"
#: ``args`` attribute with the patterns of the only parameters to train.
TRAIN_ONLY_ATTR = "train_only_modules"


def _compile_patterns(patterns: Union[None, str, Iterable[str]], what: str) -> Optional[List[Pattern]]:
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled = []
    for p in patterns:
        try:
            compiled.append(p if isinstance(p, re.Pattern) else re.compile(p))
        except re.error as exc:
            raise ValueError(f"invalid regex in args.{what}: {p!r}: {exc}") from exc
    return compiled


def _matches(name: str, patterns: Sequence[Pattern]) -> bool:
    return any(p.match(name) for p in patterns)


def _iter_modules(model) -> List[Any]:
    if isinstance(model, (list, tuple)):
        return list(model)
    return [model]


def apply_freeze_rules(
    model, frozen_patterns=None, train_only_patterns=None
) -> Tuple[int, int]:
    """Apply freeze rules to ``model`` (a module or a list of modules) in place.

    A parameter is frozen (``requires_grad_(False)``) when its name
    ``re.match``-es a pattern of ``frozen_patterns``, or when
    ``train_only_patterns`` is not None and its name matches none of them.
    Returns ``(number of params newly frozen, number of params still trainable)``.
    """
    frozen = _compile_patterns(frozen_patterns, FROZEN_ATTR)
    train_only = _compile_patterns(train_only_patterns, TRAIN_ONLY_ATTR)
    newly_frozen = 0
    trainable = 0
    if frozen is None and train_only is None:
        for module in _iter_modules(model):
            trainable += sum(1 for p in module.parameters() if p.requires_grad)
        return newly_frozen, trainable

    for module in _iter_modules(model):
        for name, param in module.named_parameters():
            freeze = (frozen is not None and _matches(name, frozen)) or (
                train_only is not None and not _matches(name, train_only)
            )
            if freeze:
                if param.requires_grad:
                    param.requires_grad_(False)
                    newly_frozen += 1
            elif param.requires_grad:
                trainable += 1
    return newly_frozen, trainable


def wrap_model_provider(inner_provider: Callable[..., Any], args) -> Callable[..., Any]:
    """Return a model provider for Megatron that builds via ``inner_provider``
    and then applies the freeze rules in ``args.frozen_modules`` and
    ``args.train_only_modules`` (regex patterns, ``re.match``, either may be
    absent or None).

    The returned provider accepts any positional and keyword arguments and
    forwards them unchanged to ``inner_provider``; it returns what the inner
    provider returned (after freezing its parameters). The rules are read from
    ``args`` each time the provider is called.
    """

    @functools.wraps(inner_provider)
    def provider(*pargs, **kwargs):
        model = inner_provider(*pargs, **kwargs)
        frozen = getattr(args, FROZEN_ATTR, None)
        train_only = getattr(args, TRAIN_ONLY_ATTR, None)
        if frozen is None and train_only is None:
            return model
        newly_frozen, trainable = apply_freeze_rules(model, frozen, train_only)
        logger.info(
            "heron freeze rules (%s=%r, %s=%r): froze %d parameter(s), %d trainable",
            FROZEN_ATTR,
            frozen,
            TRAIN_ONLY_ATTR,
            train_only,
            newly_frozen,
            trainable,
        )
        return model

    return provider
