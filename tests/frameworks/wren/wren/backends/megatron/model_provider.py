"""Model-provider wrapper that applies wren's parameter freeze rules.

Megatron's ``get_model`` builds each model chunk by calling the model provider with
keyword arguments that vary by release (``pre_process``, ``post_process``, and in newer
releases ``vp_stage``, ``config``, ``pg_collection``). :func:`wrap_model_provider`
returns a provider that forwards whatever it is called with to wren's inner provider
and then freezes parameters according to two optional lists on wren's ``args``:

* ``args.wren_frozen``: regex patterns; a parameter whose name matches any of them
  (``re.search``) gets ``requires_grad=False``.
* ``args.wren_trainable``: regex patterns; only parameters whose name matches one of
  them (``re.search``) stay trainable, every other parameter gets ``requires_grad=False``.

Freezing happens before Megatron wraps the model in DDP, so frozen parameters get no
grad buffers. Rules only ever set ``requires_grad=False``; they never unfreeze.

This module imports only the standard library at import time.
"""

import functools
import logging
import re
from typing import Iterable, List, Optional, Pattern, Sequence, Union

logger = logging.getLogger(__name__)

FROZEN_ARG = "wren_frozen"
TRAINABLE_ARG = "wren_trainable"


def _compile_patterns(
    patterns: Optional[Union[str, Iterable[str]]], arg_name: str
) -> Optional[List[Pattern]]:
    """None / absent / empty -> None (no rule). A single string counts as one pattern."""
    if patterns is None:
        return None
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"invalid regex in args.{arg_name}: {pattern!r}: {exc}") from exc
    return compiled or None


def _matches(name: str, patterns: Sequence[Pattern]) -> bool:
    return any(p.search(name) for p in patterns)


def _iter_modules(model):
    if isinstance(model, (list, tuple)):
        for m in model:
            yield from _iter_modules(m)
    elif model is not None:
        yield model


def apply_freeze_rules(model, frozen=None, trainable=None) -> int:
    """Set ``requires_grad=False`` on parameters of ``model`` according to the rules.

    ``model`` is a ``torch.nn.Module`` or a list/tuple of them. A parameter is frozen
    if its name (from ``named_parameters()``) matches any pattern in ``frozen``, or if
    ``trainable`` is given and the name matches none of its patterns. Patterns are
    applied with ``re.search``. ``None`` or an empty list means "no rule".
    Returns the number of parameters this call switched from trainable to frozen.
    """
    frozen_re = _compile_patterns(frozen, FROZEN_ARG)
    trainable_re = _compile_patterns(trainable, TRAINABLE_ARG)
    if frozen_re is None and trainable_re is None:
        return 0
    newly_frozen = 0
    for module in _iter_modules(model):
        for name, param in module.named_parameters():
            freeze = (frozen_re is not None and _matches(name, frozen_re)) or (
                trainable_re is not None and not _matches(name, trainable_re)
            )
            if freeze and param.requires_grad:
                param.requires_grad_(False)
                newly_frozen += 1
    return newly_frozen


def wrap_model_provider(inner_provider, args):
    """Return a Megatron model provider that builds via ``inner_provider`` and freezes.

    The returned callable forwards all positional and keyword arguments unchanged to
    ``inner_provider(*args, **kwargs)``, applies the freeze rules read from
    ``args.wren_frozen`` / ``args.wren_trainable`` (missing attributes count as None) to
    the returned model (a module, or a list/tuple of modules), and returns the very
    object ``inner_provider`` returned. The rules are read from ``args`` on every call.
    """
    if not callable(inner_provider):
        raise TypeError(f"inner_provider must be callable, got {inner_provider!r}")
    wren_args = args

    @functools.wraps(inner_provider)
    def model_provider(*provider_args, **provider_kwargs):
        model = inner_provider(*provider_args, **provider_kwargs)
        frozen = getattr(wren_args, FROZEN_ARG, None)
        trainable = getattr(wren_args, TRAINABLE_ARG, None)
        n = apply_freeze_rules(model, frozen=frozen, trainable=trainable)
        if n:
            logger.info("wren: froze %d parameter tensors (frozen=%r, trainable=%r)",
                        n, frozen, trainable)
        return model

    return model_provider


__all__ = ["FROZEN_ARG", "TRAINABLE_ARG", "apply_freeze_rules", "wrap_model_provider"]
