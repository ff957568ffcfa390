"""Megatron, and the torch modules frameworks patch beside it, as they were before a framework's code ran: taken,
then put back, around every import of the framework the harness makes and every apply a case makes.

A framework whose import is its apply patches at import whatever its declaration says: ms-swift's ``swift.megatron``
runs ``init_megatron_env()`` from its ``__init__``, which re-binds ``p2p_communication._batched_p2p_ops`` and
``torch.distributed``'s checkpoint validation. Were those left bound after the harness imported the framework to find
its declared functions, every later case would take them for Megatron's own (an import observed as "re-bound:
the framework's -> the framework's", an apply checked over its own earlier self), and an import that raised midway
would leave its first patches to the next case. What is put back: every name of every loaded module of
:data:`PATCHED_LIBRARIES` (names added since are dropped, submodules imported meanwhile kept), and every name of every
class those modules define (a method set on ``TopKRouter``, a marker ``_patched = True`` that would make the next
apply skip). A module first imported inside the block has no earlier state: the modules a caller names in
``preload`` are imported before the state is taken, so that their patches are put back too.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

PATCHED_LIBRARIES = ("megatron", "torch")
"""The libraries whose modules a framework may re-bind besides the owners it declares."""

CLASS_LIBRARIES = ("megatron", "torch.distributed")
"""The libraries whose classes' names are put back too (torch's thousands of others are not a framework's to patch)."""

_MISSING = object()


@dataclass(frozen=True)
class UpstreamState:
    """Each loaded module of the libraries with its namespace, and each class they define with its own."""

    modules: list[tuple[ModuleType, dict[str, Any]]]
    classes: list[tuple[type, dict[str, Any]]]


def module_namespaces(libraries: Iterable[str] = PATCHED_LIBRARIES) -> list[tuple[ModuleType, dict[str, Any]]]:
    """Every loaded module of ``libraries`` with its namespace as it is now."""
    roots = tuple(libraries)
    return [
        (module, dict(vars(module)))
        for name, module in list(sys.modules.items())
        if isinstance(module, ModuleType) and _under(name, roots)
    ]


def upstream_state(
    libraries: Iterable[str] = PATCHED_LIBRARIES, class_libraries: Iterable[str] = CLASS_LIBRARIES
) -> UpstreamState:
    """The state :func:`restore_upstream` puts back: the namespaces of the loaded modules of ``libraries`` and of
    the classes defined in those of ``class_libraries``."""
    modules = module_namespaces(libraries)
    roots = tuple(class_libraries)
    classes: dict[int, tuple[type, dict[str, Any]]] = {}
    for module, namespace in modules:
        if not _under(module.__name__, roots):
            continue
        # type(), not isinstance() or .__module__: a deprecated stand-in (torch.distributed.reduce_op) warns on lookups.
        for value in namespace.values():
            if issubclass(type(value), type) and id(value) not in classes:
                if _under(str(vars(value).get("__module__")), roots):
                    classes[id(value)] = (value, dict(vars(value)))
    return UpstreamState(modules, list(classes.values()))


def restore_upstream(state: UpstreamState) -> None:
    """Put back every namespace ``state`` holds, whatever the code run since did to it."""
    restore_modules(state.modules)
    for cls, before in state.classes:
        restore_namespace(cls, before)


def restore_modules(saved: list[tuple[ModuleType, dict[str, Any]]]) -> None:
    """Bind back every name a module held in ``saved`` and now holds otherwise, and drop the names added since that
    are no submodules (an import made meanwhile stays importable)."""
    for module, before in saved:
        namespace = vars(module)
        for name in [n for n in namespace if n not in before and not isinstance(namespace[n], ModuleType)]:
            delattr(module, name)
        for name, value in before.items():
            if namespace.get(name, _MISSING) is not value:
                setattr(module, name, value)


def restore_namespace(owner: Any, before: dict[str, object]) -> None:
    """Bind every name of ``owner`` (a module or a class) to its object in ``before``; remove the names added
    since."""
    namespace = vars(owner)
    for name in [name for name in namespace if name not in before]:
        delattr(owner, name)
    for name, value in before.items():
        if namespace.get(name, _MISSING) is not value:
            setattr(owner, name, value)


@contextmanager
def upstream_restored(
    preload: Iterable[str] = (),
    libraries: Iterable[str] = PATCHED_LIBRARIES,
    class_libraries: Iterable[str] = CLASS_LIBRARIES,
) -> Iterator[UpstreamState]:
    """Import the modules ``preload`` names (one that cannot be imported is skipped: the import that needs it says
    so), take the state of ``libraries`` (see :func:`upstream_state`), run the block, and put the state back, also
    when the block raises."""
    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    state = upstream_state(libraries, class_libraries)
    try:
        yield state
    finally:
        restore_upstream(state)


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)
