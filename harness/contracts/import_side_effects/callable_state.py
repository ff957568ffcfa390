"""Which functions and classes some modules bind, and the code and defaults of those functions: the capture the
session watch (:mod:`harness.contracts.import_side_effects.session_watch`) compares after every case, and the reach over
classes and functions the detector's ``function-state`` and ``class-attribute`` probes share with it."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter, is_
from types import BuiltinFunctionType, CodeType, FunctionType, ModuleType
from typing import Any

from harness.contracts.import_side_effects.probes.base import (
    MISSING,
    SideEffect,
    binds_new_submodule,
    changed_bindings,
    describe,
    describe_code,
    namespace_of,
    shorten,
)


def _home_name(value: object) -> str | None:
    """``module.qualname`` of a class or function: the binding a report prefers when it is bound under several."""
    try:
        module, qualname = value.__module__, value.__qualname__  # type: ignore[attr-defined]
    except Exception:
        return None
    return f"{module}.{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


class Reach:
    """The classes bound in some modules and the functions reachable from them, each under one name.

    A function is reachable as a module attribute or from a class's ``__dict__`` (directly, or wrapped by
    ``staticmethod``, ``classmethod`` or ``property``). Each object is named by the first binding seen, unless a
    later one matches its home (:func:`_home_name`) and the first does not; a function found in a class is named
    after the class's final name. Home names are only looked up when an object is seen a second time. The tables are
    flat dicts of plain values, so that a snapshot of thousands of functions adds few objects for the garbage
    collector to traverse.
    """

    def __init__(self, *, functions: bool) -> None:
        self._with_functions = functions
        # By id: the object, and its binding -- a dotted name or, for a function found in a class, (id of the class,
        # label); whether that binding is the object's home, once looked up.
        self.classes: dict[int, type] = {}
        self.functions: dict[int, FunctionType] = {}
        self._bindings: dict[int, str | tuple[int, str]] = {}
        self._at_home: dict[int, bool] = {}

    def add_module(self, name: str, namespace: Mapping[str, object]) -> list[object]:
        """Note the classes and functions bound in a module's namespace; return the ones not seen before."""
        added: list[object] = []
        functions, bindings = self.functions, self._bindings
        for attribute, value in list(namespace.items()):
            kind = type(value)
            if kind is FunctionType:
                if not self._with_functions:
                    continue
                key = id(value)
                if key not in functions:
                    functions[key] = value  # type: ignore[assignment]
                    bindings[key] = f"{name}.{attribute}"
                    added.append(value)
                else:
                    self._seen_again(value, f"{name}.{attribute}")
            elif issubclass(kind, type):
                added.extend(self.add_class(f"{name}.{attribute}", value))  # type: ignore[arg-type]
        return added

    def add_class(self, name: str, cls: type) -> list[object]:
        """Note a class bound as ``name`` and, the first time, its functions; return the objects not seen before."""
        if id(cls) in self.classes:
            self._seen_again(cls, name)
            return []
        self.classes[id(cls)] = cls
        self._bindings[id(cls)] = name
        added: list[object] = [cls]
        if self._with_functions:
            for label, function in _class_functions(cls):
                if id(function) not in self.functions:
                    self.functions[id(function)] = function
                    self._bindings[id(function)] = (id(cls), label)
                    added.append(function)
                else:
                    self._seen_again(function, (id(cls), label))
        return added

    def _seen_again(self, value: object, binding: str | tuple[int, str]) -> None:
        key = id(value)
        at_home = self._at_home.get(key)
        if at_home is None:
            at_home = self._at_home[key] = _home_name(value) == self._home_of(self._bindings[key])
        if not at_home and _home_name(value) == self._home_of(binding):
            self._bindings[key], self._at_home[key] = binding, True

    def _home_of(self, binding: str | tuple[int, str]) -> str | None:
        """The home name an object bound this way would have."""
        if isinstance(binding, str):
            return binding
        owner, label = binding
        home = _home_name(self.classes[owner])
        return f"{home}.{label.partition('.')[0]}" if home is not None else None

    def name(self, value: object) -> str:
        """The dotted name of a class or function noted here."""
        binding = self._bindings[id(value)]
        if isinstance(binding, tuple):
            owner, label = binding
            return f"{self.name(self.classes[owner])}.{label}"
        return binding


def _class_functions(cls: type) -> Iterator[tuple[str, FunctionType]]:
    """``(label, function)`` for the functions in a class's own ``__dict__``, unwrapping static and class methods
    (labelled by the attribute) and properties (``attribute.fget`` and so on)."""
    try:
        items = list(vars(cls).items())
    except Exception:
        return
    for attribute, value in items:
        kind = type(value)
        if kind is FunctionType:
            yield attribute, value
        elif issubclass(kind, (staticmethod, classmethod)):
            function = getattr(value, "__func__", None)
            if type(function) is FunctionType:
                yield attribute, function
        elif issubclass(kind, property):
            for accessor in ("fget", "fset", "fdel"):
                function = getattr(value, accessor, None)
                if type(function) is FunctionType:
                    yield f"{attribute}.{accessor}", function


# What function-state compares, a plain tuple for speed: (__code__, __defaults__, __kwdefaults__, its items).
FunctionState = tuple[CodeType, "tuple[Any, ...] | None", "dict[str, Any] | None", "tuple[tuple[str, Any], ...]"]


def function_state(function: FunctionType) -> FunctionState:
    """What of a function a change in place can replace: its code, defaults and keyword defaults (the dict itself
    and its items, as code may swap the dict or fill it)."""
    kwdefaults = function.__kwdefaults__
    return function.__code__, function.__defaults__, kwdefaults, tuple(kwdefaults.items()) if kwdefaults else ()


def function_changes(old: FunctionState, new: FunctionState) -> Iterator[str]:
    """One line per part of a function's state that differs between two captures."""
    (old_code, old_defaults, old_kwdefaults, old_items), (new_code, new_defaults, new_kwdefaults, new_items) = old, new
    if old_code is not new_code:
        yield f"__code__ replaced ({describe_code(old_code)} -> {describe_code(new_code)})"
    if old_defaults is not new_defaults and not _same_items(old_defaults or (), new_defaults or ()):
        yield f"__defaults__ replaced ({describe(old_defaults)} -> {describe(new_defaults)})"
    if not _same_kwdefault_items(old_items, new_items):
        how = "changed in place" if old_kwdefaults is new_kwdefaults else "replaced"
        yield f"__kwdefaults__ {how} ({describe(dict(old_items) or None)} -> {describe(dict(new_items) or None)})"


def _same_kwdefault_items(old: tuple[tuple[str, Any], ...], new: tuple[tuple[str, Any], ...]) -> bool:
    """The same keyword defaults: the same names, each bound to the very same object (an equal one put in its place
    is a change, and no default's ``__eq__`` is called)."""
    return len(old) == len(new) and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(old, new, strict=True))


def _same_items(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """The same items, by identity."""
    return len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))


_BINDING_TYPES = (FunctionType, BuiltinFunctionType, type, ModuleType)
_CLASS_BINDING_TYPES = (FunctionType, BuiltinFunctionType, staticmethod, classmethod, property, type)
"""What a class attribute must be bound to for the watch to compare it: methods and what wraps them, nested classes.
Class-level data (caches, counters) is left alone, as module data globals are."""


def _class_bindings(cls: type) -> dict[str, object]:
    try:
        items = list(vars(cls).items())
    except Exception:
        return {}
    return {attribute: value for attribute, value in items if issubclass(type(value), _CLASS_BINDING_TYPES)}


_Raw = tuple[list[str], list[object]]
"""A namespace's attribute names and the objects bound to them, in order: compared by identity, the cheap test that
nothing in it was bound again."""

_CODE, _DEFAULTS, _KWDEFAULTS = (attrgetter(part) for part in ("__code__", "__defaults__", "__kwdefaults__"))


def _raw(namespace: Mapping[str, object]) -> _Raw:
    return list(namespace), list(namespace.values())


def _same_raw(old: _Raw, new: _Raw) -> bool:
    """Whether a namespace holds the same names bound to the same objects as before (C loops, no Python per item)."""
    return old[0] == new[0] and all(map(is_, old[1], new[1]))


def _same_bindings(old: Mapping[str, object], new: Mapping[str, object]) -> bool:
    return old.keys() == new.keys() and all(map(is_, old.values(), new.values()))


@dataclass(frozen=True, eq=False)
class _FunctionParts:
    """Every watched function's ``__code__``, ``__defaults__`` and ``__kwdefaults__``, in one list each (built and
    compared by identity in C), and the functions whose keyword defaults are a dict that code may fill in place."""

    codes: list[object]
    defaults: list[object]
    kwdefaults: list[object]
    with_kwdefaults: list[FunctionType]

    @classmethod
    def of(cls, functions: list[FunctionType]) -> _FunctionParts:
        kwdefaults = list(map(_KWDEFAULTS, functions))
        filled = [function for function, value in zip(functions, kwdefaults, strict=True) if value is not None]
        return cls(list(map(_CODE, functions)), list(map(_DEFAULTS, functions)), kwdefaults, filled)

    def same_as(self, old: _FunctionParts, states: Mapping[int, FunctionState]) -> bool:
        """Whether no function's state changed since ``old`` (whose functions are the same, with ``states``)."""
        return (
            all(map(is_, self.codes, old.codes))
            and all(map(is_, self.defaults, old.defaults))
            and all(map(is_, self.kwdefaults, old.kwdefaults))
            and all(
                _same_kwdefault_items(states[id(function)][3], function_state(function)[3])
                for function in self.with_kwdefaults
            )
        )


@dataclass(frozen=True, eq=False)
class CallableState:
    """What :func:`capture_callable_state` saw, for :func:`callable_state_changes` to compare.

    ``modules`` are the loaded modules under ``prefixes``; ``bindings`` holds, per module, every attribute bound to
    a function, class or module; ``names`` every attribute name of each module (to tell an added callable from a
    data global re-bound to one); ``functions`` every function reachable from those modules and classes, by
    ``id`` (:meth:`function_name` names one), and ``states`` their ``(__code__, __defaults__, __kwdefaults__, its
    items)``; ``classes`` every class bound in those modules, by ``id``, and ``class_bindings`` its methods (and what
    wraps them) by attribute. It keeps references to all of them, so identities stay meaningful. A part that is the
    very object of the capture it was taken ``since`` is unchanged from it.
    """

    prefixes: tuple[str, ...]
    modules: Mapping[str, ModuleType]
    bindings: Mapping[str, Mapping[str, object]]
    names: Mapping[str, frozenset[str]]
    functions: Mapping[int, FunctionType]
    states: Mapping[int, FunctionState]
    classes: Mapping[int, type]
    class_bindings: Mapping[int, Mapping[str, object]]
    _reach: Reach = dataclasses.field(repr=False)
    _module_raw: Mapping[str, _Raw] = dataclasses.field(repr=False)
    _class_raw: Mapping[int, _Raw] = dataclasses.field(repr=False)
    _parts: _FunctionParts = dataclasses.field(repr=False)

    def function_name(self, function: FunctionType | type) -> str:
        """The dotted name a report uses for one of :attr:`functions` or :attr:`classes` (resolved only when asked:
        it costs)."""
        return self._reach.name(function)


def _class_raw(cls: type) -> _Raw:
    try:
        return _raw(vars(cls))
    except Exception:
        return [], []


def _classes_since(since: CallableState) -> tuple[dict[int, _Raw], dict[int, Mapping[str, object]]] | None:
    """The classes ``since`` reached, each with its names as bound now and its methods as ``since`` saw them where
    they are bound to the same objects; ``None`` as soon as one binds another callable (the reach is then walked
    again)."""
    class_raw: dict[int, _Raw] = {}
    class_bindings: dict[int, Mapping[str, object]] = {}
    for key, cls in since.classes.items():
        class_raw[key] = raw = _class_raw(cls)
        old = since.class_bindings[key]
        if not _same_raw(since._class_raw[key], raw) and not _same_bindings(old, _class_bindings(cls)):
            return None
        class_bindings[key] = old
    return class_raw, class_bindings


def capture_callable_state(prefixes: Collection[str], since: CallableState | None = None) -> CallableState:
    """Snapshot the callables of the loaded modules under ``prefixes`` (each covering its submodules): the identity
    of each module attribute bound to a function, class or module, and ``__code__``, ``__defaults__`` and
    ``__kwdefaults__`` of those functions and of the functions in those classes' ``__dict__``. Data globals are not
    recorded: Megatron re-binds its process-group globals whenever model parallelism is set up.

    Given the capture taken ``since`` (the session watch's baseline), whatever is bound as it was then is not walked
    again: a module or class whose names are bound to the very same objects keeps that capture's bindings, and when
    no module or class binds another callable, the functions and classes reached are that capture's, with its states
    if no function's code or defaults changed. The watch takes a capture after every case, most of them of a Megatron
    nothing changed; the result compares as a full capture would.
    """
    prefixes = tuple(prefixes)
    if since is not None and since.prefixes != prefixes:
        since = None
    exact, dotted = frozenset(prefixes), tuple(f"{prefix}." for prefix in prefixes)
    modules: dict[str, ModuleType] = {}
    bindings: dict[str, Mapping[str, object]] = {}
    names: dict[str, frozenset[str]] = {}
    module_raw: dict[str, _Raw] = {}
    rebound = False
    for name, module in list(sys.modules.items()):
        if not (name in exact or name.startswith(dotted)) or not issubclass(type(module), ModuleType):
            continue
        namespace = namespace_of(module)
        if namespace is None:
            continue
        modules[name] = module
        module_raw[name] = raw = _raw(namespace)
        previous = since if since is not None and since.modules.get(name) is module else None
        if previous is not None and _same_raw(previous._module_raw[name], raw):
            names[name], bindings[name] = previous.names[name], previous.bindings[name]
            continue
        names[name] = frozenset(raw[0])
        found = {
            attribute: value for attribute, value in zip(*raw, strict=True) if issubclass(type(value), _BINDING_TYPES)
        }
        if previous is not None and _same_bindings(previous.bindings[name], found):
            bindings[name] = previous.bindings[name]
        else:
            bindings[name], rebound = found, True
    classes = None if since is None or rebound or modules.keys() != since.modules.keys() else _classes_since(since)
    if since is None or classes is None:
        reach = Reach(functions=True)
        for name, found in bindings.items():
            reach.add_module(name, found)
        class_raw = {key: _class_raw(cls) for key, cls in reach.classes.items()}
        class_bindings = {key: _class_bindings(cls) for key, cls in reach.classes.items()}
    else:
        reach, (class_raw, class_bindings) = since._reach, classes
    parts = _FunctionParts.of(list(reach.functions.values()))
    if since is not None and classes is not None and parts.same_as(since._parts, since.states):
        states = since.states
    else:
        states = {key: function_state(function) for key, function in reach.functions.items()}
    return CallableState(
        prefixes,
        modules,
        bindings,
        names,
        reach.functions,
        states,
        reach.classes,
        class_bindings,
        reach,
        module_raw,
        class_raw,
        parts,
    )


def callable_state_changes(before: CallableState, after: CallableState) -> list[SideEffect]:
    """What differs between two captures, as ``module-attribute``, ``class-attribute`` and ``function-state``
    effects. Only modules and classes ``before`` saw are compared (one imported later is not); data globals are not
    compared at all."""
    effects = []
    for module_name, old_bindings in before.bindings.items():
        module = before.modules[module_name]
        if module_name in after.bindings and after.modules[module_name] is module:
            new_bindings, new_names = after.bindings[module_name], after.names[module_name]
            if new_bindings is old_bindings:
                continue  # taken over by a capture ``since`` this one: bound as it was
        else:  # gone from sys.modules, or replaced there: compare the module object ``before`` saw, as it is now
            live = namespace_of(module) or {}
            new_bindings = {key: value for key, value in live.items() if issubclass(type(value), _BINDING_TYPES)}
            new_names = frozenset(live)
        effects += _binding_changes(
            module, module_name, old_bindings, before.names[module_name], new_bindings, new_names
        )
    for key, function in before.functions.items() if after.states is not before.states else ():
        old = before.states[key]
        new = after.states[key] if after.functions.get(key) is function else function_state(function)
        if new is old or (new[0] is old[0] and new[1] is old[1] and new[2] is old[2] and not new[3] and not old[3]):
            continue  # the common case, without building the comparison
        name = before.function_name(function)
        effects += [SideEffect("function-state", name, shorten(change)) for change in function_changes(old, new)]
    for key, cls in before.classes.items():
        old_attributes = before.class_bindings[key]
        new_attributes = after.class_bindings[key] if after.classes.get(key) is cls else _class_bindings(cls)
        if new_attributes is old_attributes:
            continue
        same_keys = old_attributes.keys() == new_attributes.keys()
        if not same_keys or any(old_attributes[a] is not new_attributes[a] for a in old_attributes):
            effects += _class_changes(before.function_name(cls), old_attributes, new_attributes)
    return effects


def _class_changes(class_name: str, old: Mapping[str, object], new: Mapping[str, object]) -> Iterator[SideEffect]:
    for attribute in sorted(set(old) | set(new)):
        before, after = old.get(attribute, MISSING), new.get(attribute, MISSING)
        if before is after:
            continue
        if before is MISSING:
            detail = f"added: {describe(after)}"
        elif after is MISSING:
            detail = f"deleted: {describe(before)}"
        else:
            detail = _rebound(describe(before), describe(after))
        yield SideEffect("class-attribute", f"{class_name}.{attribute}", shorten(detail))


def _binding_changes(
    module: ModuleType,
    module_name: str,
    old_bindings: Mapping[str, object],
    old_names: frozenset[str],
    new_bindings: Mapping[str, object],
    new_names: frozenset[str],
) -> Iterator[SideEffect]:
    for attribute, name, old, new in changed_bindings(module_name, old_bindings, new_bindings):
        if old is MISSING:
            if attribute in old_names:
                detail = f"re-bound: a data value -> {describe(new)}"
            elif binds_new_submodule(name, new):
                continue  # the import system binding a newly imported submodule
            else:
                detail = f"added: {describe(new)}"
        elif new is MISSING:
            if attribute in new_names:
                detail = _rebound(describe(old), describe((namespace_of(module) or {}).get(attribute)))
            else:
                detail = f"deleted: {describe(old)}"
        else:
            detail = _rebound(describe(old), describe(new))
        yield SideEffect("module-attribute", name, shorten(detail))


def _rebound(before: str, after: str) -> str:
    """A re-binding in words: where both objects read the same (a closure that a second run of the same patching
    function made again), one name twice would look like no change, so the detail says it is another object."""
    if before == after:
        return f"re-bound to another object of the same name: {after}"
    return f"re-bound: {before} -> {after}"
