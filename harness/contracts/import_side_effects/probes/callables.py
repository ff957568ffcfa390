"""The probes over what is reachable from the watched modules: functions whose code, defaults or keyword defaults are
swapped in place (``function-state``) and attributes of the watched classes, dataclass field defaults included
(``class-attribute``)."""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Iterator, Mapping
from types import FunctionType
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.callable_state import FunctionState, Reach, function_changes, function_state
from harness.contracts.import_side_effects.probes.base import MISSING, SideEffect, describe, namespace_of, shorten
from harness.contracts.import_side_effects.probes.modules import WatchingProbe, namespace_changes


def _watched_tensor_class() -> type | None:
    """``torch.Tensor`` when torch is imported (looked up without triggering a lazy import)."""
    torch = sys.modules.get("torch")
    tensor = (namespace_of(torch) or {}).get("Tensor") if torch is not None else None
    return tensor if isinstance(tensor, type) else None


class _ReachingProbe(WatchingProbe):
    """A probe over what is reachable from the watched modules (their classes, and with ``functions`` their functions
    and the classes' functions), plus ``torch.Tensor`` when torch is loaded; :meth:`_snapshot` records each newly
    reached object."""

    def __init__(self, watch: tuple[str, ...], *, functions: bool) -> None:
        super().__init__(watch)
        self._reach = Reach(functions=functions)

    def start(self) -> None:
        tensor = _watched_tensor_class()
        if tensor is not None:
            self._snapshot(self._reach.add_class("torch.Tensor", tensor))
        super().start()

    def _watch(self, name: str, module: object) -> None:
        namespace = namespace_of(module)
        if namespace is not None:
            self._snapshot(self._reach.add_module(name, namespace))

    @abstractmethod
    def _snapshot(self, added: list[object]) -> None:
        """Record the state of objects reached for the first time."""


class FunctionStateProbe(_ReachingProbe):
    """A watched function whose code, defaults or keyword defaults were replaced in place: Megatron keeps calling the
    same object, so a re-binding check never sees it."""

    kinds = ("function-state",)

    def __init__(self, watch: tuple[str, ...]) -> None:
        super().__init__(watch, functions=True)
        self._before: dict[int, FunctionState] = {}

    def _snapshot(self, added: list[object]) -> None:
        for value in added:
            if type(value) is FunctionType:
                self._before[id(value)] = function_state(value)

    def effects(self) -> Iterator[SideEffect]:
        for key, old in self._before.items():
            function = self._reach.functions[key]
            for change in function_changes(old, function_state(function)):
                yield SideEffect("function-state", self._reach.name(function), shorten(change))


class _ClassState(NamedTuple):
    cls: type
    namespace: dict[str, object]
    fields: dict[str, tuple[Any, object, object]]  # dataclass field name -> (field, default, default_factory)


class ClassProbe(_ReachingProbe):
    """Attributes of the watched classes (methods, class attributes, dataclass field defaults) added, deleted or
    re-bound: every instance Megatron makes afterwards behaves otherwise."""

    kinds = ("class-attribute",)

    def __init__(self, watch: tuple[str, ...]) -> None:
        super().__init__(watch, functions=False)
        self._before: list[_ClassState] = []

    def _snapshot(self, added: list[object]) -> None:
        for cls in added:
            namespace = namespace_of(cls)
            if namespace is not None:
                self._before.append(_ClassState(cls, namespace, _dataclass_fields(namespace)))  # type: ignore[arg-type]

    def effects(self) -> Iterator[SideEffect]:
        changed_fields: dict[int, list[Any]] = {}  # id(field) -> [name, changes, declared here]
        for state in self._before:
            name = self._reach.name(state.cls)
            after = namespace_of(state.cls) or {}
            yield from namespace_changes(name, state.namespace, after, "class-attribute")
            own_annotations = after.get("__annotations__")
            current = _dataclass_fields(after)
            for field_name, (field, default, factory) in state.fields.items():
                changes = _field_changes(default, factory, current.get(field_name))
                if not changes:
                    continue
                declared_here = isinstance(own_annotations, dict) and field_name in own_annotations
                entry = changed_fields.get(id(field))
                if entry is None or (declared_here and not entry[2]):
                    changed_fields[id(field)] = [f"{name}.{field_name}", changes, declared_here]
        for name, changes, _ in changed_fields.values():
            for change in changes:
                yield SideEffect("class-attribute", name, shorten(change))


def _dataclass_fields(namespace: Mapping[str, object]) -> dict[str, tuple[Any, object, object]]:
    fields = namespace.get("__dataclass_fields__")
    if not isinstance(fields, dict):
        return {}
    return {
        name: (field, getattr(field, "default", MISSING), getattr(field, "default_factory", MISSING))
        for name, field in fields.items()
    }


def _field_changes(default: object, factory: object, now: tuple[Any, object, object] | None) -> list[str]:
    if now is None:
        return ["dataclass field removed"]
    _, new_default, new_factory = now
    changes = []
    if new_default is not default:
        changes.append(f"dataclass default {describe(default)} -> {describe(new_default)}")
    if new_factory is not factory:
        changes.append(f"dataclass default_factory {describe(factory)} -> {describe(new_factory)}")
    return changes
