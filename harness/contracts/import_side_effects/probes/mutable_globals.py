"""The probe of module-level containers of the watched modules changed in place (``mutable-global``): a dict, list,
set, bytearray or deque a module holds as a global, compared against a shallow copy."""

from __future__ import annotations

import collections
import gc
import logging
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.probes.base import (
    IGNORED_ATTRIBUTES,
    MISSING,
    SideEffect,
    describe,
    namespace_of,
    shorten,
)
from harness.contracts.import_side_effects.probes.modules import WatchingProbe

_CONTAINERS = (dict, list, set, bytearray, collections.deque)
_SKIPPED_GLOBALS = frozenset({"__builtins__", *IGNORED_ATTRIBUTES})
_SIMPLE_VALUES = (int, float, complex, str, bytes, bool, type(None))


class _Global(NamedTuple):
    name: str
    value: Any
    before: Any
    aliases: list[str]


class MutableGlobalProbe(WatchingProbe):
    """Module-level lists, dicts and sets of the watched modules changed in place: the binding stays, the contents that
    Megatron reads do not."""

    kinds = ("mutable-global",)

    def __init__(self, watch: tuple[str, ...]) -> None:
        super().__init__(watch)
        self._globals: dict[int, _Global] = {}
        self._seen: set[int] = set()

    def start(self) -> None:
        # Containers other kinds cover, and module namespaces bound as data (``_G = globals()``).
        covered = [sys.modules, sys.path, sys.meta_path, sys.path_hooks, sys.path_importer_cache, sys.argv]
        covered += [warnings.filters, gc.callbacks, logging.Logger.manager.loggerDict]
        self._covered = {id(value) for value in covered}
        self._covered.update(id(namespace) for namespace in map(_module_namespace, list(sys.modules.values())))
        super().start()

    def _watch(self, name: str, module: object) -> None:
        namespace = namespace_of(module)
        if namespace is None or id(module) in self._seen:
            return
        self._seen.add(id(module))
        for attribute, value in list(namespace.items()):
            if attribute in _SKIPPED_GLOBALS or not issubclass(type(value), _CONTAINERS) or id(value) in self._covered:
                continue
            known = self._globals.get(id(value))
            if known is not None:
                known.aliases.append(f"{name}.{attribute}")
            else:
                self._globals[id(value)] = _Global(f"{name}.{attribute}", value, _container_copy(value), [])

    def effects(self) -> Iterator[SideEffect]:
        for entry in self._globals.values():
            changes = _container_changes(entry.before, _container_copy(entry.value))
            if not changes:
                continue
            kind = type(entry.value).__name__
            also = f" (also bound as {', '.join(entry.aliases[:2])})" if entry.aliases else ""
            count = f"{len(changes)} changes: " if len(changes) > 1 else ""
            detail = f"{kind} changed in place: {count}{'; '.join(changes)}{also}"
            yield SideEffect("mutable-global", entry.name, shorten(detail))


def _module_namespace(module: object) -> object:
    return vars(module) if issubclass(type(module), ModuleType) else None


def _container_copy(value: Any) -> Any:
    """A shallow copy that reads the container itself, not methods a subclass overrides."""
    if isinstance(value, dict):
        return dict.copy(value)
    if isinstance(value, set):
        return set.copy(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return list.copy(value) if isinstance(value, list) else list(value)


def _container_changes(before: Any, after: Any) -> list[str]:
    if isinstance(before, dict):
        changes = [f"key {describe(key)} added: {describe(value)}" for key, value in after.items() if key not in before]
        changes += [
            f"key {describe(key)} removed (was {describe(value)})" for key, value in before.items() if key not in after
        ]
        for key, old in before.items():
            new = after.get(key, MISSING)
            if new is not MISSING and new is not old and not _equal_simple(old, new):
                changes.append(f"key {describe(key)} re-bound: {describe(old)} -> {describe(new)}")
        return changes
    if isinstance(before, set):
        return [f"item added: {describe(item)}" for item in after - before] + [
            f"item removed: {describe(item)}" for item in before - after
        ]
    if isinstance(before, bytes):
        return [] if before == after else [f"contents changed (length {len(before)} -> {len(after)})"]
    old_ids, new_ids = [id(item) for item in before], [id(item) for item in after]
    changes = [f"item added at {at}: {describe(item)}" for at, item in enumerate(after) if new_ids[at] not in old_ids]
    changes += [f"item removed: {describe(item)}" for at, item in enumerate(before) if old_ids[at] not in new_ids]
    if not changes and old_ids != new_ids:
        changes.append(f"reordered (length {len(before)} -> {len(after)})")
    return changes


def _equal_simple(old: object, new: object) -> bool:
    """Equal values of a simple immutable type: re-binding one to an equal copy changes nothing."""
    return type(old) is type(new) and type(old) in _SIMPLE_VALUES and old == new
