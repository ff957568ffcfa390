"""Megatron, and the torch modules frameworks patch beside it, as they were before a framework's code ran: taken,
then put back, around every import of the framework the harness makes and every apply a case makes.

A framework whose import is its apply patches at import whatever its declaration says: ms-swift's ``swift.megatron``
runs ``init_megatron_env()`` from its ``__init__``, which re-binds ``p2p_communication._batched_p2p_ops`` and
``torch.distributed``'s checkpoint validation. Were those left bound after the harness imported the framework to find
its declared functions, every later case would take them for Megatron's own (an import observed as "re-bound:
the framework's -> the framework's", an apply checked over its own earlier self), and an import that raised midway
would leave its first patches to the next case.

What is put back: every name of every loaded Megatron module, and the names torch's modules bind to functions,
classes and other callables (torch's data, such as ``torch.cuda._initialized`` or the process-group counter, is
torch's own bookkeeping: putting it back would hide a CUDA context the block made and re-run lazy initialisation);
names added since are dropped, except submodules imported meanwhile; and every name of the classes Megatron and
``torch.distributed`` define (a method set on ``TopKRouter``, a marker ``_patched = True`` that would make the next
apply skip). What changes in place is not put back: a function's code or defaults swapped, a dataclass field's
default, a registry filled (the import family reports those as function-state and mutable-global effects). A module
first imported inside the block has no earlier state: the modules a caller names in ``preload`` are imported before
the state is taken, so that their patches are put back too. A name that cannot be put back (a member added to an
``Enum``, which refuses ``delattr``) does not stop the others: :class:`UpstreamNotRestored` names each, after all the
rest is back.
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

DATA_LIBRARIES = ("megatron",)
"""The libraries whose modules' data globals are put back too; the others' only where bound to a callable."""

CLASS_LIBRARIES = ("megatron", "torch.distributed")
"""The libraries whose classes' names are put back too (torch's thousands of others are not a framework's to patch)."""

_MISSING = object()


class UpstreamNotRestored(RuntimeError):
    """Names the block changed that could not be put back; everything else was."""


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


def restore_upstream(state: UpstreamState, data_libraries: Iterable[str] = DATA_LIBRARIES) -> list[str]:
    """Put back every namespace ``state`` holds, whatever the code run since did to it; the names that could not be
    put back, each with why (none where all were)."""
    failed = restore_modules(state.modules, data_libraries)
    for cls, before in state.classes:
        failed += restore_namespace(cls, before)
    return failed


def restore_modules(saved: list[tuple[ModuleType, dict[str, Any]]], data_libraries: Iterable[str] = ()) -> list[str]:
    """Bind back every name a module held in ``saved`` and now holds otherwise, and drop the names added since,
    except the submodules imported meanwhile (they stay importable); in a module outside ``data_libraries``, only
    names bound to a callable or a module before or now. The names that could not be put back, each with why."""
    roots = tuple(data_libraries)
    failed: list[str] = []
    for module, before in saved:
        keeps_data = _under(module.__name__, roots)
        namespace = vars(module)
        for name in [n for n in namespace if n not in before and not _submodule(module, n, namespace[n])]:
            if keeps_data or _binds(namespace[name]):
                failed += _put(module, name, _MISSING)
        for name, value in before.items():
            now = namespace.get(name, _MISSING)
            if now is not value and (keeps_data or _binds(value) or _binds(now)):
                failed += _put(module, name, value)
    return failed


def restore_namespace(owner: Any, before: dict[str, object]) -> list[str]:
    """Bind every name of ``owner`` (a module or a class) to its object in ``before``; remove the names added
    since. The names that could not be put back, each with why."""
    namespace = vars(owner)
    failed: list[str] = []
    for name in [name for name in namespace if name not in before]:
        failed += _put(owner, name, _MISSING)
    for name, value in before.items():
        if namespace.get(name, _MISSING) is not value:
            failed += _put(owner, name, value)
    return failed


@contextmanager
def upstream_restored(
    preload: Iterable[str] = (),
    libraries: Iterable[str] = PATCHED_LIBRARIES,
    class_libraries: Iterable[str] = CLASS_LIBRARIES,
) -> Iterator[UpstreamState]:
    """Import the modules ``preload`` names (one that cannot be imported is skipped: the import that needs it says
    so), take the state of ``libraries`` (see :func:`upstream_state`), run the block, and put the state back, also
    when the block raises: what the block raised then stays the error, with a note naming what could not be put
    back; else that is an :class:`UpstreamNotRestored`."""
    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    state = upstream_state(libraries, class_libraries)
    try:
        yield state
    except BaseException as err:
        failed = restore_upstream(state)
        if failed:
            err.add_note(_not_restored(failed))
        raise
    failed = restore_upstream(state)
    if failed:
        raise UpstreamNotRestored(_not_restored(failed))


def _put(owner: Any, name: str, value: object) -> list[str]:
    """Bind ``name`` on ``owner`` to ``value`` (delete it for ``_MISSING``); what went wrong, in one line, if it did."""
    try:
        if value is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, value)
    except (AttributeError, TypeError) as err:
        where = (
            owner.__name__ if isinstance(owner, ModuleType) else f"{vars(owner).get('__module__')}.{owner.__qualname__}"
        )
        return [f"{where}.{name} ({type(err).__name__}: {err})"]
    return []


def _not_restored(failed: list[str]) -> str:
    return f"the framework's code left Megatron changed where it cannot be put back: {'; '.join(failed)}"


def _binds(value: object) -> bool:
    """Whether ``value`` is what a patch binds (a function, a class, any callable, a module), not data."""
    return isinstance(value, ModuleType) or callable(value)


def _submodule(module: ModuleType, name: str, value: object) -> bool:
    """Whether ``value``, bound as ``name`` on ``module``, is its submodule as imported (not a stand-in bound there)."""
    return isinstance(value, ModuleType) and sys.modules.get(f"{module.__name__}.{name}") is value


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)
