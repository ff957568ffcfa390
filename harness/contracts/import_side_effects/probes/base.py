"""What every probe shares: the :class:`SideEffect` record it reports, the :class:`Probe` interface, and the helpers
that describe a changed value in a short, safe detail line. A leaf module, so that the probes, the detector and the
callable-state capture can all import it without a cycle."""

from __future__ import annotations

import dataclasses
import reprlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import BuiltinFunctionType, CodeType, FunctionType, MappingProxyType, MethodType, ModuleType
from typing import Any

# Written by the interpreter itself on first use (warning registries, lazily created annotations, protocol caches,
# the slot names copyreg caches on a class the first time one of its instances is copied or pickled).
IGNORED_ATTRIBUTES = frozenset(
    {"__warningregistry__", "__annotations__", "__protocol_attrs__", "__non_callable_proto_members__", "__slotnames__"}
)
MISSING = object()
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_MAX_DETAIL = 200


@dataclass(frozen=True)
class SideEffect:
    """One change a call made: its kind (one of ``harness.formats.effect_kinds.KINDS``), what changed, and how.
    ``message`` is the whole text an allowance by message matches (a log record's message, never shortened); it takes
    no part in equality."""

    kind: str
    name: str
    detail: str
    message: str = dataclasses.field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}"


class Probe(ABC):
    """Snapshots and instruments one area of the process; ``stop`` undoes everything ``start`` did."""

    kinds: tuple[str, ...] = ()

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def effects(self) -> Iterator[SideEffect]: ...


def replace_attribute(stack: ExitStack, owner: object, name: str, value: object) -> Any:
    """Bind ``owner.name`` to ``value`` until ``stack`` closes; return the original."""
    original = vars(owner)[name]
    setattr(owner, name, value)
    stack.callback(setattr, owner, name, original)
    return original


def describe(value: object) -> str:
    """A short, safe description of an object for a detail line."""
    kind_of = type(value)
    if issubclass(kind_of, (type, FunctionType, BuiltinFunctionType, MethodType)):
        kind = "class" if issubclass(kind_of, type) else "function"
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", "?")
        if "pybind11_" in qualname:  # pybind11 functions are qualified by an internal record type
            qualname = getattr(value, "__name__", qualname)
        return f"<{kind} {module}.{qualname}>" if module else f"<{kind} {qualname}>"
    if issubclass(kind_of, ModuleType):
        return f"<module {getattr(value, '__name__', '?')}>"
    if issubclass(kind_of, CodeType):
        return describe_code(value)  # type: ignore[arg-type]
    if issubclass(kind_of, property):
        return f"<property of {describe(value.fget)}>"  # type: ignore[attr-defined]
    wrapped = getattr(value, "__func__", None) if issubclass(kind_of, (staticmethod, classmethod)) else None
    if wrapped is None and kind_of.__name__ == "instancemethod":  # C-level methods, as in pybind11 classes
        wrapped = getattr(value, "__func__", None)
    if wrapped is not None:
        return f"<{kind_of.__name__} of {describe(wrapped)}>"
    if value is dataclasses.MISSING:
        return "MISSING"
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def describe_code(code: CodeType) -> str:
    """A code object by name and the last three parts of its file's path, so a swapped ``__code__`` says where the
    new code came from."""
    parts = Path(code.co_filename).parts
    where = "/".join(parts[-3:]) if len(parts) > 3 else code.co_filename
    return f"<code {code.co_name} at {where}:{code.co_firstlineno}>"


def shorten(text: str) -> str:
    """A detail cut to a length a failure message can carry."""
    return text if len(text) <= _MAX_DETAIL else f"{text[: _MAX_DETAIL - 3]}..."


def namespace_of(owner: object) -> dict[str, Any] | None:
    """The ``__dict__`` of a module or class, or ``None`` where it has none (or will not say)."""
    try:
        namespace = vars(owner)
    except Exception:
        return None
    if isinstance(namespace, MappingProxyType):
        return dict(namespace)
    return namespace if isinstance(namespace, dict) else None


def changed_bindings(
    prefix: str, before: Mapping[str, object], after: Mapping[str, object]
) -> Iterator[tuple[str, str, object, object]]:
    """``(attribute, dotted name, old, new)`` for every attribute added, deleted or re-bound by identity between two
    snapshots of a namespace (:data:`MISSING` on the side it is absent from), leaving out the attributes every module
    changes (:data:`IGNORED_ATTRIBUTES`)."""
    for attribute in [*before, *(name for name in after if name not in before)]:
        old, new = before.get(attribute, MISSING), after.get(attribute, MISSING)
        if old is not new and attribute not in IGNORED_ATTRIBUTES:
            yield attribute, f"{prefix}.{attribute}", old, new


def binds_new_submodule(name: str, new: object) -> bool:
    """Whether an added attribute ``name`` is the import system binding the newly imported submodule of that name."""
    return issubclass(type(new), ModuleType) and getattr(new, "__name__", None) == name


def contains(items: Iterable[object], item: object) -> bool:
    """Whether ``item`` itself (by identity, not equality) is one of ``items``."""
    return any(existing is item for existing in items)
