"""Model-provider wrapper that freezes parameters by regex rules.

Megatron-LM's ``get_model`` calls the provider with keywords that drift across versions
(``pre_process``, ``post_process``, and, depending on the version, ``add_encoder``,
``add_decoder``, ``vp_stage``, ``config``, ``pg_collection``). The wrapper forwards every call
unchanged (same positional and keyword arguments) and only post-processes the returned model.
"""

import functools
import re
from typing import Any, Callable, Iterable, List, Optional, Pattern

FREEZE_ATTR = "freeze_patterns"
TRAINABLE_ATTR = "trainable_patterns"


def _compile(args: Any, attr: str) -> List[Pattern]:
    raw = getattr(args, attr, None)
    if raw is None:
        return []
    if isinstance(raw, (str, re.Pattern)):
        raw = [raw]
    out = []
    for p in raw:
        try:
            out.append(p if isinstance(p, re.Pattern) else re.compile(p))
        except re.error as exc:
            raise ValueError(f"tern.wrap: bad regex in args.{attr}: {p!r}: {exc}") from exc
    return out


def _modules(model: Any) -> Iterable[Any]:
    if isinstance(model, (list, tuple)):
        for m in model:
            yield from _modules(m)
    elif model is not None:
        yield model


def apply_freeze_rules(
    model: Any, freeze: List[Pattern], trainable: List[Pattern]
) -> List[str]:
    """Set ``requires_grad=False`` on every parameter of ``model`` (a module or a list/tuple of
    modules) whose name from ``named_parameters()`` is hit (``re.search``) by a ``freeze``
    pattern, or, when ``trainable`` is non-empty, is hit by none of the ``trainable`` patterns.
    Never sets ``requires_grad=True``. Returns the names frozen by this call."""
    frozen: List[str] = []
    if not freeze and not trainable:
        return frozen
    for module in _modules(model):
        for name, param in module.named_parameters():
            hit_freeze = any(p.search(name) for p in freeze)
            kept = not trainable or any(p.search(name) for p in trainable)
            if (hit_freeze or not kept) and param.requires_grad:
                param.requires_grad_(False)
                frozen.append(name)
    return frozen


def wrap(provider: Callable[..., Any], args: Any) -> Callable[..., Any]:
    """Return a provider that calls ``provider(*a, **kw)`` unchanged, then freezes parameters
    of the returned model by the rules in ``args.freeze_patterns`` and
    ``args.trainable_patterns`` (lists of regex strings; a missing or None attribute means no
    rule; a lone string is one pattern), and returns the same model object.

    Rules are read and compiled when ``wrap`` is called (bad regexes raise ValueError then).
    A parameter is frozen if a freeze pattern hits its name, or if trainable patterns are
    given and none hits it: freeze_patterns win over trainable_patterns.
    """
    if not callable(provider):
        raise TypeError(f"tern.wrap: provider must be callable, got {provider!r}")
    freeze = _compile(args, FREEZE_ATTR)
    trainable = _compile(args, TRAINABLE_ATTR)

    @functools.wraps(provider)
    def tern_frozen_provider(*a, **kw):
        model = provider(*a, **kw)
        apply_freeze_rules(model, freeze, trainable)
        return model

    tern_frozen_provider.tern_freeze_patterns = tuple(p.pattern for p in freeze)
    tern_frozen_provider.tern_trainable_patterns = tuple(p.pattern for p in trainable)
    return tern_frozen_provider
