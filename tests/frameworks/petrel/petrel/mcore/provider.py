"""Model-provider wrapper that freezes parameters by regex rules.

``wrap(provider, args)`` returns a provider that forwards every call (positional and
keyword arguments, whatever the Megatron version passes: ``pre_process``,
``post_process``, ``vp_stage``, ``config``, ``pg_collection``, ...) unchanged to
``provider``, then applies the freeze rules read from ``args`` to the returned model.
"""

import functools
import re
from typing import Iterable, List, Optional, Sequence, Union

import torch

__all__ = ["apply_freeze_rules", "wrap", "FREEZE_ATTR", "TRAINABLE_ATTR"]

FREEZE_ATTR = "petrel_freeze"
TRAINABLE_ATTR = "petrel_trainable"

_Patterns = Optional[Union[str, "re.Pattern", Iterable[Union[str, "re.Pattern"]]]]


def _compile(patterns: _Patterns, what: str) -> List["re.Pattern"]:
    if patterns is None:
        return []
    if isinstance(patterns, (str, re.Pattern)):
        patterns = [patterns]
    compiled = []
    for p in patterns:
        if isinstance(p, re.Pattern):
            compiled.append(p)
        elif isinstance(p, str):
            try:
                compiled.append(re.compile(p))
            except re.error as exc:
                raise ValueError(f"invalid regex in {what}: {p!r}: {exc}") from exc
        else:
            raise TypeError(f"{what} entries must be str or re.Pattern, got {type(p).__name__}")
    return compiled


def _modules(model) -> Sequence[torch.nn.Module]:
    if isinstance(model, (list, tuple)):
        return list(model)
    return [model]


def apply_freeze_rules(model, freeze: _Patterns = None, trainable: _Patterns = None) -> List[str]:
    """Freeze parameters of ``model`` (a module or a list of modules) in place.

    A parameter is frozen (``requires_grad_(False)``) when one of its names
    ``re.search``-matches a ``freeze`` pattern, or when ``trainable`` is non-empty and
    none of its names matches a ``trainable`` pattern.  Freeze wins over trainable.
    Nothing is ever unfrozen.  Returns the names of the parameters frozen by this call.
    """
    freeze_re = _compile(freeze, FREEZE_ATTR)
    trainable_re = _compile(trainable, TRAINABLE_ATTR)
    frozen: List[str] = []
    if not freeze_re and not trainable_re:
        return frozen
    for module in _modules(model):
        names_of = {}
        params = {}
        # remove_duplicate=False: a shared parameter is judged by all of its names.
        for name, param in module.named_parameters(remove_duplicate=False):
            names_of.setdefault(id(param), []).append(name)
            params[id(param)] = param
        for key, param in params.items():
            names = names_of[key]
            hit_freeze = any(r.search(n) for r in freeze_re for n in names)
            keep = (not trainable_re) or any(r.search(n) for r in trainable_re for n in names)
            if (hit_freeze or not keep) and param.requires_grad:
                param.requires_grad_(False)
                frozen.append(names[0])
    return frozen


def wrap(provider, args):
    """Return a model provider that calls ``provider`` unchanged, then freezes by rules.

    Rules are read from ``args.petrel_freeze`` (patterns to freeze) and
    ``args.petrel_trainable`` (patterns that alone stay trainable) at each call; a missing
    attribute or ``None`` means no rule.  The returned callable carries ``provider``'s
    metadata and signature (``functools.wraps``) so signature inspection sees the inner
    provider.
    """
    if not callable(provider):
        raise TypeError(f"provider must be callable, got {type(provider).__name__}")

    @functools.wraps(provider)
    def petrel_model_provider(*call_args, **call_kwargs):
        model = provider(*call_args, **call_kwargs)
        apply_freeze_rules(
            model,
            freeze=getattr(args, FREEZE_ATTR, None),
            trainable=getattr(args, TRAINABLE_ATTR, None),
        )
        return model

    return petrel_model_provider
