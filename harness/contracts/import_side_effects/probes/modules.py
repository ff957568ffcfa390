"""The probes over the watched modules -- those loaded under the watched prefixes when the detector starts, and the
fakes of every isolated load during its block -- and the one that compares their namespaces and ``sys.modules``
(kinds ``module-attribute`` and ``sys-modules``)."""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from typing import NamedTuple

from harness.contracts.import_side_effects.isolation import Isolation, observe_isolations
from harness.contracts.import_side_effects.probes.base import (
    MISSING,
    Probe,
    SideEffect,
    binds_new_submodule,
    changed_bindings,
    describe,
)

WATCHED_BY_DEFAULT = ("megatron", "torch.distributed")


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


class WatchingProbe(Probe):
    """A probe over the watched modules: those loaded at start under the watched prefixes, and the fakes of every
    isolated load that starts before the probe stops (see :meth:`_watch`)."""

    def __init__(self, watch: tuple[str, ...]) -> None:
        self._watched = (*WATCHED_BY_DEFAULT, *watch)
        self._stack = ExitStack()

    def start(self) -> None:
        for name, module in list(sys.modules.items()):
            if _under(name, self._watched):
                self._watch(name, module)
        self._stack.enter_context(observe_isolations(self._isolation_started, self._isolation_finished))

    def _isolation_started(self, isolation: Isolation) -> None:
        for name, module in isolation.fakes.items():
            self._watch(name, module)

    def _isolation_finished(self, isolation: Isolation) -> None:
        pass

    def stop(self) -> None:
        self._stack.close()

    @abstractmethod
    def _watch(self, name: str, module: object) -> None:
        """Snapshot what this probe compares in ``module`` (called once per module, or again for the same one)."""


class _Namespace(NamedTuple):
    name: str
    owner: object
    before: dict[str, object]


class ModuleProbe(WatchingProbe):
    """Names bound, deleted or re-bound on the watched modules (``module-attribute``), and modules imported for the
    first time (``sys-modules``): Megatron looks its functions up by name at call time."""

    kinds = ("module-attribute", "sys-modules")

    def __init__(self, watch: tuple[str, ...], allowed_imports: tuple[str, ...], own_prefix: str | None) -> None:
        super().__init__(watch)
        self._expected = (*allowed_imports, *((own_prefix,) if own_prefix else ()))
        self._namespaces: dict[int, _Namespace] = {}
        self._isolations: list[Isolation] = []

    def start(self) -> None:
        self._before = dict(sys.modules)
        super().start()

    def _isolation_finished(self, isolation: Isolation) -> None:
        self._isolations.append(isolation)

    def _watch(self, name: str, module: object) -> None:
        namespace = getattr(module, "__dict__", None)
        if id(module) in self._namespaces or not isinstance(namespace, dict):
            return
        self._namespaces[id(module)] = _Namespace(name, module, dict(namespace))

    def stop(self) -> None:
        super().stop()
        self._after = dict(sys.modules)

    def effects(self) -> Iterator[SideEffect]:
        for namespace in self._namespaces.values():
            yield from namespace_changes(namespace.name, namespace.before, dict(vars(namespace.owner)))
        yield from self._module_changes()

    def _module_changes(self) -> Iterator[SideEffect]:
        before, after = self._before, self._after
        reported = set()
        for name, module in after.items():
            if name not in before and not self._is_expected(name, ()):
                reported.add(name)
                yield SideEffect("sys-modules", name, f"imported: {describe(module)}")
            elif name in before and before[name] is not module:
                yield SideEffect("sys-modules", name, f"replaced: {describe(before[name])} -> {describe(module)}")
        for name in sorted(before.keys() - after.keys()):
            yield SideEffect("sys-modules", name, "removed")
        for isolation in self._isolations:
            origin = isolation.origin or "an isolated block"
            for name in isolation.imported:
                if name not in reported and not self._is_expected(name, isolation.own):
                    reported.add(name)
                    yield SideEffect("sys-modules", name, f"imported by the isolated load of {origin} (removed again)")

    def _is_expected(self, name: str, own: tuple[str, ...]) -> bool:
        return name.partition(".")[0] in sys.stdlib_module_names or _under(name, (*self._expected, *own))


def namespace_changes(
    prefix: str, before: dict[str, object], after: dict[str, object], kind: str = "module-attribute"
) -> Iterator[SideEffect]:
    """Attributes added, deleted or re-bound (by identity) between two snapshots of a namespace, as ``kind``."""
    for _, name, old, new in changed_bindings(prefix, before, after):
        if old is MISSING:
            if binds_new_submodule(name, new):
                continue  # reported as sys-modules
            yield SideEffect(kind, name, f"added: {describe(new)}")
        elif new is MISSING:
            yield SideEffect(kind, name, f"deleted: {describe(old)}")
        else:
            yield SideEffect(kind, name, f"re-bound: {describe(old)} -> {describe(new)}")
