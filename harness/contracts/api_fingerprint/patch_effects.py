"""What a framework's patch does to the Megatron symbols it declares replaced: the object each name is bound to
after apply, and whether undo puts every owner's namespace back exactly.

The owner of ``module:Class.method`` is the class, of ``module:function`` the module; its namespace (``vars``) is
what Megatron's lookups read, so "exactly" means the same objects under the same names, no name added or left
behind: a class attribute set on a subclass and left there after undo shadows its base's for good, even where it is
the base's own function.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import Any

_MISSING = object()


def owner_of(symbol: str) -> tuple[Any, str]:
    """The object whose namespace holds ``symbol``'s name, and the name."""
    module_name, _, qualname = symbol.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def snapshot(owners: Iterable[Any]) -> dict[int, tuple[Any, dict[str, Any]]]:
    """Each owner's namespace as it is now, by identity of the owner."""
    return {id(owner): (owner, dict(vars(owner))) for owner in owners}


def restore(saved: dict[int, tuple[Any, dict[str, Any]]]) -> None:
    """Put every owner's namespace back to ``saved``, whatever undo did or failed to do."""
    for owner, before in saved.values():
        now = vars(owner)
        for name in [name for name in now if name not in before]:
            delattr(owner, name)
        for name, value in before.items():
            if now.get(name, _MISSING) is not value:
                setattr(owner, name, value)


def namespace_changes(saved: dict[int, tuple[Any, dict[str, Any]]]) -> list[str]:
    """One line per name an owner's namespace holds otherwise than in ``saved``."""
    changes = []
    for owner, before in saved.values():
        now = vars(owner)
        label = getattr(owner, "__qualname__", getattr(owner, "__name__", repr(owner)))
        for name in sorted(set(before) | set(now)):
            old, new = before.get(name, _MISSING), now.get(name, _MISSING)
            if old is new:
                continue
            if old is _MISSING:
                changes.append(f"{label}.{name}: added ({_describe(new)}), not there before apply")
            elif new is _MISSING:
                changes.append(f"{label}.{name}: removed (was {_describe(old)})")
            else:
                changes.append(f"{label}.{name}: {_describe(new)}, was {_describe(old)}")
    return changes


def bound_to(value: Any, replacement: Any) -> bool:
    """Whether a name bound to ``value`` calls ``replacement`` (itself, or wrapped as a static or class method)."""
    candidates = [value, getattr(value, "__func__", None), inspect.unwrap(value) if callable(value) else None]
    return any(candidate is replacement for candidate in candidates if candidate is not None)


def _describe(value: Any) -> str:
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else type(value).__name__
