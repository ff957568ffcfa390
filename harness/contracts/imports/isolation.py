"""Loading a subject's code so that the import leaves ``sys.modules`` exactly as it found it.

The gate must prove that merely importing an adapter package changes nothing for the rest of the process. That
proof is only worth something if the import itself is hermetic: the package is loaded under a fresh module name (two
loads never share module-level state), missing optional dependencies are supplied as declared fakes, and afterwards
``sys.modules`` holds the same keys bound to the same objects as before -- also when the package raises or imports
something that is not installed.

Modules that the load imports for the first time (the package's own submodules, stdlib or third-party modules it
pulls in) are *removed* at restore, and so is the attribute through which the import system bound such a module to a
pre-existing parent package. They are recorded in :attr:`Isolation.imported` so that a side-effect detector can
report them (see :func:`observe_isolations`). Only ``sys.modules`` is restored: attributes the loaded code re-binds
on other modules stay re-bound, which is what :mod:`harness.contracts.imports.side_effects` reports.

Limits worth knowing:

* A dependency with native state (torch, CUDA extensions) should be imported *before* an isolated load: if the load
  imports it first, the restore removes it from ``sys.modules`` and a later import would initialise it a second time.
* A module loaded by dotted name is loaded from its file as a top-level module under the fresh name, so relative
  imports only work for packages (a package directory, or the dotted name of a package).
* Imports that the loaded code performs later, when its functions run, are not isolated.
* The swap of ``sys.modules`` is process-wide and not thread-safe; load in a quiet process.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType

UNIQUE_PREFIX = "_isolated_"

_counter = itertools.count()
_observers: list[tuple[Callable[[Isolation], None], Callable[[Isolation], None]]] = []


@dataclass
class Isolation:
    """What one isolated stretch of imports did, for callers and observers.

    ``fakes`` are the modules that stood in ``sys.modules`` during it; ``root`` and ``origin`` name the module that
    :func:`load_isolated` loaded and where from; ``own`` holds the module-name prefixes that count as the loaded
    package's own; ``imported`` is filled when the isolation ends, with every module it imported for the first time
    (all removed again at restore).
    """

    fakes: Mapping[str, ModuleType]
    root: str | None = None
    origin: str | None = None
    own: tuple[str, ...] = ()
    imported: tuple[str, ...] = ()


@contextmanager
def observe_isolations(on_start: Callable[[Isolation], None], on_finish: Callable[[Isolation], None]) -> Iterator[None]:
    """Call ``on_start`` before each isolation changes ``sys.modules`` and ``on_finish`` after it restored it.

    A detector needs this because the modules an isolated load imports are gone again by the time it compares
    ``sys.modules``, and the fakes a load patches are only in ``sys.modules`` while it runs.
    """
    entry = (on_start, on_finish)
    _observers.append(entry)
    try:
        yield
    finally:
        _observers.remove(entry)


@contextmanager
def isolated_modules(fakes: Mapping[str, ModuleType] | None = None) -> Iterator[Isolation]:
    """Place ``fakes`` in ``sys.modules`` for the block, then restore ``sys.modules`` to the same keys and objects.

    Real submodules of a faked package (``megatron.core.x`` when ``megatron.core`` is faked) are hidden for the block,
    so that code under test sees one consistent, fake package rather than a mix of fake and real modules.
    """
    fakes = dict(fakes or {})
    isolation = Isolation(fakes=MappingProxyType(fakes))
    for on_start, _ in list(_observers):
        on_start(isolation)
    saved = dict(sys.modules)
    try:
        for name in [name for name in saved if _shadowed_by(name, fakes)]:
            del sys.modules[name]
        sys.modules.update(fakes)
        yield isolation
    finally:
        isolation.imported = _restore(saved, fakes)
        for _, on_finish in list(_observers):
            on_finish(isolation)


def load_isolated(
    target: str | Path, fakes: Mapping[str, ModuleType] | None = None, *, name: str | None = None
) -> ModuleType:
    """Load ``target`` under a fresh module name with ``fakes`` importable, leaving ``sys.modules`` as it was.

    ``target`` is a :class:`~pathlib.Path` or a string naming a ``.py`` file or a package directory (a string is a
    path when it ends in ``.py`` or contains a path separator), or else a dotted module name, found with
    :func:`importlib.util.find_spec` and loaded from its source file. ``name`` replaces the generated unique module
    name. Exceptions raised by the loaded code, ``ModuleNotFoundError`` included, propagate after the restore.
    """
    with isolated_modules(fakes) as isolation:
        source, package_dir, own = _resolve(target)
        stem = re.sub(r"\W", "_", (package_dir or source).stem)
        module_name = name or f"{UNIQUE_PREFIX}{next(_counter)}_{stem}"
        isolation.root, isolation.origin, isolation.own = module_name, str(package_dir or source), (module_name, *own)
        locations = [str(package_dir)] if package_dir is not None else None
        spec = importlib.util.spec_from_file_location(module_name, source, submodule_search_locations=locations)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {source} as a module", path=str(source))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module


def _resolve(target: str | Path) -> tuple[Path, Path | None, tuple[str, ...]]:
    """The source file to execute, the package directory if it is a package, and the extra own-name prefixes."""
    if isinstance(target, Path) or target.endswith(".py") or "/" in target or "\\" in target:
        return (*_resolve_path(Path(target)), ())
    spec = importlib.util.find_spec(target)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {target!r}", name=target)
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise ImportError(f"module {target!r} has no Python source file to load (origin {spec.origin!r})", name=target)
    origin = Path(spec.origin)
    return origin, origin.parent if spec.submodule_search_locations is not None else None, (target.partition(".")[0],)


def _resolve_path(path: Path) -> tuple[Path, Path | None]:
    path = path.resolve()
    if path.is_dir():
        init = path / "__init__.py"
        if not init.is_file():
            raise ImportError(f"{path} is not a package: it has no __init__.py", path=str(path))
        return init, path
    if not path.is_file():
        raise ModuleNotFoundError(f"no module file {path}", path=str(path))
    if path.name == "__init__.py":
        return path, path.parent
    return path, None


def _shadowed_by(name: str, fakes: Mapping[str, ModuleType]) -> bool:
    """Whether ``name`` is a real submodule of a faked package, hidden while the fakes stand in."""
    parent = name.rpartition(".")[0]
    while parent:
        if parent in fakes:
            return name not in fakes
        parent = parent.rpartition(".")[0]
    return False


def _restore(saved: dict[str, ModuleType], fakes: Mapping[str, ModuleType]) -> tuple[str, ...]:
    """Put ``sys.modules`` back to ``saved``; return the names that had been imported for the first time."""
    imported = []
    for name, module in list(sys.modules.items()):
        if name in saved:
            continue
        del sys.modules[name]
        if fakes.get(name) is module:
            continue
        imported.append(name)
        parent_name, _, child = name.rpartition(".")
        parent = saved.get(parent_name)
        if parent is not None and getattr(parent, "__dict__", {}).get(child) is module:
            delattr(parent, child)
    for name, module in saved.items():
        if sys.modules.get(name) is not module:
            sys.modules[name] = module
    return tuple(imported)
