"""Model provider wrapper that applies kestrel's parameter freeze rules.

Megatron's ``get_model`` calls the model provider once per model chunk, e.g.
``model_provider_func(pre_process=..., post_process=...)`` plus ``vp_stage=...``
with virtual pipeline parallelism and, in newer training loops,
``config=...`` / ``pg_collection=...``. :func:`wrap_model_provider` returns a
provider that forwards whatever it is called with, unchanged, to the
framework's inner provider, then applies the freeze rules to what it built.

Freeze rules are read from the framework ``args`` namespace:

* ``args.freeze_param_regexes``: parameters whose name matches any of these
  patterns get ``requires_grad=False``.
* ``args.trainable_param_regexes``: if given, only parameters whose name matches
  one of these patterns stay trainable; all others get ``requires_grad=False``.

Patterns are matched with :func:`re.search` against the names from
``named_parameters()`` of the module returned by the inner provider (i.e. before
Megatron wraps it in Float16Module / DDP, so there is no ``module.`` prefix).
Either attribute may be absent or None; an empty list is treated like None.
Freeze rules are only ever applied as ``requires_grad=False``: a parameter that
the inner provider already froze is never unfrozen.
"""

import logging
import re
from typing import Callable, Iterable, List, Optional, Pattern, Sequence, Union

logger = logging.getLogger(__name__)

__all__ = ["wrap_model_provider", "apply_freeze_rules"]

FREEZE_ARG_NAME = "freeze_param_regexes"
TRAINABLE_ARG_NAME = "trainable_param_regexes"


def _compile_patterns(value, arg_name: str) -> Optional[List[Pattern]]:
    if value is None:
        return None
    if isinstance(value, (str, re.Pattern)):
        value = [value]
    patterns = []
    for item in value:
        if isinstance(item, re.Pattern):
            patterns.append(item)
            continue
        if not isinstance(item, str):
            raise TypeError(f"args.{arg_name} must contain regex strings, got {item!r}")
        try:
            patterns.append(re.compile(item))
        except re.error as exc:
            raise ValueError(f"invalid regex in args.{arg_name}: {item!r}: {exc}") from exc
    return patterns or None


def _iter_modules(built) -> Iterable:
    if isinstance(built, (list, tuple)):
        for item in built:
            yield from _iter_modules(item)
    elif built is not None:
        yield built


def apply_freeze_rules(
    module,
    freeze_patterns: Optional[Sequence[Union[str, Pattern]]] = None,
    trainable_patterns: Optional[Sequence[Union[str, Pattern]]] = None,
) -> List[str]:
    """Set ``requires_grad=False`` on parameters of ``module`` according to the rules.

    ``module`` may also be a list/tuple of modules. Patterns are matched with
    ``re.search`` on ``named_parameters()`` names. Returns the names of the
    parameters that this call switched from trainable to frozen.
    """
    freeze = _compile_patterns(freeze_patterns, FREEZE_ARG_NAME)
    trainable = _compile_patterns(trainable_patterns, TRAINABLE_ARG_NAME)
    if freeze is None and trainable is None:
        return []

    newly_frozen: List[str] = []
    used = set()
    for mod in _iter_modules(module):
        for name, param in mod.named_parameters():
            keep = True
            if trainable is not None:
                hits = [p for p in trainable if p.search(name)]
                used.update(id(p) for p in hits)
                keep = bool(hits)
            if freeze is not None:
                hits = [p for p in freeze if p.search(name)]
                used.update(id(p) for p in hits)
                if hits:
                    keep = False
            if not keep and param.requires_grad:
                param.requires_grad_(False)
                newly_frozen.append(name)

    for arg_name, patterns in ((FREEZE_ARG_NAME, freeze), (TRAINABLE_ARG_NAME, trainable)):
        for p in patterns or ():
            if id(p) not in used:
                logger.warning(
                    "kestrel: args.%s pattern %r matched no parameter", arg_name, p.pattern
                )
    logger.info("kestrel: freeze rules froze %d parameter(s)", len(newly_frozen))
    return newly_frozen


def wrap_model_provider(inner_provider: Callable, args) -> Callable:
    """Return a Megatron model provider that builds via ``inner_provider`` and applies freeze rules.

    Args:
        inner_provider: the framework's provider; called with exactly the
            positional and keyword arguments Megatron passes.
        args: argparse-like namespace; ``args.freeze_param_regexes`` and
            ``args.trainable_param_regexes`` (lists of regex strings, may be
            absent/None) are read and compiled here, once, so bad patterns fail
            before any model is built.

    Returns:
        ``provider(*args, **kwargs)`` returning whatever ``inner_provider``
        returned (a module, or a list of modules), with freeze rules applied.
    """
    if not callable(inner_provider):
        raise TypeError(f"inner_provider must be callable, got {inner_provider!r}")
    freeze = _compile_patterns(getattr(args, FREEZE_ARG_NAME, None), FREEZE_ARG_NAME)
    trainable = _compile_patterns(getattr(args, TRAINABLE_ARG_NAME, None), TRAINABLE_ARG_NAME)

    def kestrel_model_provider(*provider_args, **provider_kwargs):
        model = inner_provider(*provider_args, **provider_kwargs)
        apply_freeze_rules(model, freeze, trainable)
        return model

    kestrel_model_provider.__name__ = getattr(inner_provider, "__name__", "kestrel_model_provider")
    kestrel_model_provider.__qualname__ = getattr(
        inner_provider, "__qualname__", kestrel_model_provider.__name__
    )
    kestrel_model_provider.__doc__ = getattr(inner_provider, "__doc__", None)
    kestrel_model_provider.__wrapped__ = inner_provider
    return kestrel_model_provider
