"""What a framework's patch does to the Megatron symbols it declares replaced: the object each name is bound to
after apply, and whether undo puts every owner's namespace back exactly.

The owner of ``module:Class.method`` is the class, of ``module:function`` the module; its namespace (``vars``) is
what Megatron's lookups read, so "exactly" means the same objects under the same names, no name added or left
behind: a class attribute set on a subclass and left there after undo shadows its base's for good, even where it is
the base's own function.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from harness.subjects.upstream_state import restore_namespace, upstream_restored

_MISSING = object()
Saved = dict[int, tuple[Any, dict[str, Any], dict[str, Any]]]
"""Owners by identity: each with its namespace and its dataclass defaults as they were."""


def owner_of(symbol: str) -> tuple[Any, str]:
    """The object whose namespace holds ``symbol``'s name, and the name."""
    module_name, _, qualname = symbol.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def snapshot(owners: Iterable[Any]) -> Saved:
    """Each owner's namespace and dataclass defaults as they are now, by identity of the owner; a class's subclasses
    are taken too (a dataclass patch re-defaults the generated ``__init__`` of every subclass that inherits the
    field)."""
    taken: Saved = {}
    for owner in owners:
        for each in [owner, *(_subclasses(owner) if isinstance(owner, type) else [])]:
            taken.setdefault(id(each), (each, dict(vars(each)), _defaults(each)))
    return taken


def restore(saved: Saved) -> None:
    """Put every owner's namespace and dataclass defaults back to ``saved``, whatever undo did or failed to do."""
    for owner, before, defaults in saved.values():
        restore_namespace(owner, before)
        _set_defaults(owner, defaults)


def namespace_changes(saved: Saved) -> list[str]:
    """One line per name an owner's namespace, or per default its dataclass fields and generated ``__init__``,
    holds otherwise than in ``saved``."""
    changes = []
    for owner, before, defaults in saved.values():
        label = getattr(owner, "__qualname__", getattr(owner, "__name__", repr(owner)))
        for name, old, new in _differences(before, dict(vars(owner))):
            if old is _MISSING:
                changes.append(f"{label}.{name}: added ({_describe(new)}), not there before apply")
            elif new is _MISSING:
                changes.append(f"{label}.{name}: removed (was {_describe(old)})")
            else:
                changes.append(f"{label}.{name}: {_describe(new)}, was {_describe(old)}")
        for name, old, new in _differences(defaults, _defaults(owner)):
            changes.append(f"{label} {name}: {new!r:.80}, was {old!r:.80}")
    return changes


def _differences(before: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    found = []
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name, _MISSING), now.get(name, _MISSING)
        if old is not new:
            found.append((name, old, new))
    return found


def _subclasses(cls: type) -> list[type]:
    found, stack = [], list(type.__subclasses__(cls))
    while stack:
        sub = stack.pop()
        if sub not in found:
            found.append(sub)
            stack.extend(type.__subclasses__(sub))
    return found


def _defaults(owner: Any) -> dict[str, Any]:
    """A dataclass's field defaults and its own generated ``__init__``'s default tuples, by what holds them."""
    found: dict[str, Any] = {}
    if isinstance(owner, type) and dataclasses.is_dataclass(owner):
        for name, field in owner.__dataclass_fields__.items():
            found[f"field {name} default"] = field.default
            found[f"field {name} default_factory"] = field.default_factory
    init = vars(owner).get("__init__") if isinstance(owner, type) else None
    if inspect.isfunction(init):
        found["__init__.__defaults__"] = init.__defaults__
        found["__init__.__kwdefaults__"] = init.__kwdefaults__
    return found


def _set_defaults(owner: Any, defaults: dict[str, Any]) -> None:
    fields = getattr(owner, "__dataclass_fields__", {})
    for key, value in defaults.items():
        if key.startswith("field "):
            name, attribute = key.removeprefix("field ").rsplit(" ", 1)
            if name in fields and getattr(fields[name], attribute) is not value:
                setattr(fields[name], attribute, value)
    init = vars(owner).get("__init__") if isinstance(owner, type) else None
    if inspect.isfunction(init):
        if "__init__.__defaults__" in defaults:
            init.__defaults__ = defaults["__init__.__defaults__"]
        if "__init__.__kwdefaults__" in defaults:
            init.__kwdefaults__ = defaults["__init__.__kwdefaults__"]


def bound_to(value: Any, replacement: Any) -> bool:
    """Whether a name bound to ``value`` calls ``replacement``: itself, wrapped as a static or class method or as a
    property's getter, or the same function made again (:func:`same_function`: a closure an apply makes anew each
    time, a module imported again); a replaced value (a default) equal to it."""
    if isinstance(replacement, staticmethod | classmethod):
        # What a bare ``replaces`` captured is the class's own binding: the wrapper, where Megatron's lookup finds
        # the function it wraps.
        replacement = replacement.__func__
    candidates = [value, getattr(value, "__func__", None), inspect.unwrap(value) if callable(value) else None]
    candidates.append(value.fget if isinstance(value, property) else None)
    if any(same_function(candidate, replacement) for candidate in candidates if candidate is not None):
        return True
    return not callable(replacement) and value == replacement


def same_function(found: Any, replacement: Any) -> bool:
    """Whether ``found`` is ``replacement`` by what it is, not by its id: the object itself, or a function of the
    same module and qualname whose code reads the same (a second import of the module that defines it, or a second
    call of the apply that makes it as a closure, makes a new function object and a new code object)."""
    if found is replacement:
        return True
    code, other = getattr(found, "__code__", None), getattr(replacement, "__code__", None)
    if code is None or other is None:
        return False
    names = ("__module__", "__qualname__")
    return all(getattr(found, n, None) == getattr(replacement, n, None) for n in names) and code == other


def descriptor_kind(value: Any) -> str:
    """How Megatron's ``self.name`` sees ``value`` bound in a class: a ``method`` gets the instance first, a
    ``classmethod`` the class, a ``staticmethod`` or another callable (``value``) neither; a ``property`` is read,
    not called."""
    for kind in (staticmethod, classmethod, property):
        if isinstance(value, kind):
            return kind.__name__
    return "method" if inspect.isfunction(value) else "value"


def upstream_kind(symbol: str) -> str:
    """The kind of ``symbol`` as Megatron defines it here: ``function`` for a module's, else its class's (or the
    nearest base's) binding's :func:`descriptor_kind`."""
    owner, name = owner_of(symbol)
    return descriptor_kind(_class_binding(owner, name)) if isinstance(owner, type) else "function"


def bound_kinds(subject: Any, symbols: list[str]) -> dict[str, str]:
    """The kind each class attribute among ``symbols`` has with the declared apply applied (``apply_replacements``);
    empty where there is no apply or it raises (another case says so)."""
    owners = {symbol: owner_of(symbol) for symbol in symbols}
    owners = {symbol: (owner, name) for symbol, (owner, name) in owners.items() if isinstance(owner, type)}
    if getattr(subject, "apply_replacements", None) is None or not owners:
        return {}
    try:
        kinds, _ = _while_applied(subject, owners, lambda owner, name: descriptor_kind(_class_binding(owner, name)))
    except Exception:
        return {}
    return kinds


def _class_binding(cls: type, name: str) -> Any:
    """What ``cls.name`` finds in the namespaces of ``cls`` and its bases, before any descriptor binds it."""
    return next((vars(each)[name] for each in cls.__mro__ if name in vars(each)), _MISSING)


def _while_applied(
    subject: Any, owners: dict[str, tuple[Any, str]], read: Callable[[Any, str], Any]
) -> tuple[dict[str, Any], Saved]:
    """Apply the subject's declared patch once, ``read(owner, name)`` for each symbol, undo it as declared (a
    framework that keeps its own record of being applied must see it undone), and put every owner back whatever
    happened: what was read, and the owners as they were before. What apply or undo raises is the caller's."""
    saved = snapshot(owner for owner, _ in owners.values())
    with upstream_restored():
        try:
            subject.apply_replacements()
            found = {symbol: read(owner, name) for symbol, (owner, name) in owners.items()}
            undo = getattr(subject, "undo_replacements", None)
            if undo is not None:
                undo()
            return found, saved
        finally:
            restore(saved)


def _describe(value: Any) -> str:
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else type(value).__name__


NOT_APPLIED_HERE = "not applied here: "
"""Why a replaced symbol was not checked applied where the declared apply left it as it was (the framework's own
version or device check skipped it, another of its functions makes it, or one of its functions raised first): no red
of its own; it is read from source, which says which."""


def captured_replacements(subject: Any, symbols: list[str]) -> dict[str, tuple[Any, str | None]]:
    """What the subject's declared apply (``apply_replacements``) binds at each of ``symbols``, read after applying
    it once and putting every owner back; with why it cannot be had, where it cannot. For a replacement made inside
    the apply (a closure), this is the only way to have it."""
    apply = getattr(subject, "apply_replacements", None)
    if not symbols:
        return {}
    if apply is None:
        why = "declared 'replaces' with no replacement named, and no [symbols_patch] apply to capture it from"
        return {symbol: (None, why) for symbol in symbols}
    owners = {symbol: owner_of(symbol) for symbol in symbols}
    try:
        bound, saved = _while_applied(subject, owners, lambda owner, name: vars(owner).get(name, _MISSING))
    except Exception as err:
        raised = f"the declared apply or undo raised {type(err).__name__}: {err}"
        return {symbol: (None, raised) for symbol in symbols}
    unchanged = f"{NOT_APPLIED_HERE}the declared apply binds nothing there"
    return {
        symbol: (value, None)
        if value is not saved[id(owners[symbol][0])][1].get(owners[symbol][1], _MISSING)
        else (None, unchanged)
        for symbol, value in bound.items()
    }
