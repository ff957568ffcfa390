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
on other modules stay re-bound, which is what :mod:`harness.contracts.import_side_effects.detector` reports.

While the fakes stand in, a meta-path finder answers imports below any fake built by
:func:`harness.contracts.import_side_effects.fake_modules.build_fakes` with a child fake package made on demand, so
``from megatron.core import parallel_state`` works beside a fake that declares only ``megatron``. Such children are in
``sys.modules`` only during the isolation, like the declared fakes; they are listed in :attr:`Isolation.created`, not
in :attr:`Isolation.imported`. The finder is in ``sys.meta_path`` only during the isolation.

A target is found without importing anything: a dotted module name is resolved parent by parent through the finders
of ``sys.meta_path`` (see :func:`adapter_location`), so a framework package whose ``__init__`` is not side-effect free
does not run merely because its adapter subpackage is loaded. The adapter's own absolute imports of its framework
(``from myframework.utils import helper``) do import the framework, as they would anywhere; that counts as the
adapter's own doing, and the framework's top-level package name counts as its own (:attr:`Isolation.own`). When a
package directory given as a path lies inside a framework package whose top-level name is not importable, the
directory holding that top-level package is appended to ``sys.path`` for the load and removed again.

Limits worth knowing:

* A dependency with native state (torch, CUDA extensions) should be imported *before* an isolated load: if the load
  imports it first, the restore removes it from ``sys.modules`` and a later import would initialise it a second time.
* A module loaded by dotted name (or a directory inside a framework package) is loaded from its file as a top-level
  module under the fresh name, so relative imports only work for packages (a package directory, or the dotted name of
  a package), and only within the package: ``from .. import x`` goes beyond the fresh top-level name and fails. If
  the framework imports the adapter by its real name, the adapter's code runs a second time under that name.
* Imports that the loaded code performs later, when its functions run, are not isolated.
* The swap of ``sys.modules`` is process-wide and not thread-safe; load in a quiet process.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType

from harness.contracts.import_side_effects.fake_modules import FakeModule

UNIQUE_PREFIX = "_isolated_"
_ABSENT = object()
_MODULE_NAME = re.compile(r"(?!\d)\w+(\.(?!\d)\w+)*")

_counter = itertools.count()
_observers: list[tuple[Callable[[Isolation], None], Callable[[Isolation], None]]] = []


@dataclass
class Isolation:
    """What one isolated stretch of imports did, for callers and observers.

    ``fakes`` are the modules that stood in ``sys.modules`` during it; ``root`` and ``origin`` name the module that
    :func:`load_isolated` loaded and where from; ``own`` holds the module-name prefixes that count as the loaded
    package's own; ``imported`` is filled when the isolation ends, with every module it imported for the first time
    (all removed again at restore); ``created`` likewise, with the fake submodules made on demand below the fakes
    (also removed again, and not in ``imported``).
    """

    fakes: Mapping[str, ModuleType]
    root: str | None = None
    origin: str | None = None
    own: tuple[str, ...] = ()
    imported: tuple[str, ...] = ()
    created: tuple[str, ...] = ()


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
    so that code under test sees one consistent, fake package rather than a mix of fake and real modules. Importing
    a submodule below a fake built by :func:`~harness.contracts.import_side_effects.fake_modules.build_fakes` yields a
    child fake made on demand (see the module docstring); ``sys.meta_path`` holds the finder that makes it only for the
    block.
    """
    fakes = dict(fakes or {})
    isolation = Isolation(fakes=MappingProxyType(fakes))
    for on_start, _ in list(_observers):
        on_start(isolation)
    saved = dict(sys.modules)
    finder = _FakeChildFinder(fakes)
    try:
        for name in [name for name in saved if _shadowed_by(name, fakes)]:
            del sys.modules[name]
        sys.modules.update(fakes)
        if any(isinstance(module, FakeModule) for module in fakes.values()):
            sys.meta_path.insert(0, finder)
        yield isolation
    finally:
        _remove_by_identity(sys.meta_path, finder)
        isolation.created = tuple(finder.created)
        isolation.imported = _restore(saved, {**finder.created, **fakes})
        for _, on_finish in list(_observers):
            on_finish(isolation)


def load_isolated(
    target: str | Path, fakes: Mapping[str, ModuleType] | None = None, *, name: str | None = None
) -> ModuleType:
    """Load ``target`` under a fresh module name with ``fakes`` importable, leaving ``sys.modules`` as it was.

    ``target`` is a :class:`~pathlib.Path` or a string naming a ``.py`` file or a package directory (a string is a
    path when it ends in ``.py`` or contains a path separator), or else a dotted module name, found without importing
    anything (see :func:`adapter_location`) and loaded from its source file. A dotted name is loaded under that very
    name, with any copy of it (and of its submodules) already imported hidden for the load, so its body runs again
    and a logger named after ``__name__`` carries the framework's own name; a path gets a generated unique name.
    ``name`` replaces either. A target that cannot be found raises before anything changes; exceptions raised by the
    loaded code, ``ModuleNotFoundError`` included, propagate after the restore.
    """
    source, package_dir, own, source_root = _resolve(target)
    dotted = isinstance(target, str) and not _is_path_string(target)
    with isolated_modules(fakes) as isolation, _on_sys_path(source_root):
        stem = re.sub(r"\W", "_", (package_dir or source).stem)
        module_name = name or (target if dotted else f"{UNIQUE_PREFIX}{next(_counter)}_{stem}")
        for loaded in [m for m in sys.modules if m == module_name or m.startswith(f"{module_name}.")]:
            del sys.modules[loaded]
        isolation.root, isolation.origin, isolation.own = module_name, str(package_dir or source), (module_name, *own)
        locations = [str(package_dir)] if package_dir is not None else None
        spec = importlib.util.spec_from_file_location(module_name, source, submodule_search_locations=locations)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {source} as a module", path=str(source))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module


def import_as_the_framework(dotted: str, source_root: Path | None = None, rerun_from: str | None = None) -> ModuleType:
    """``import <dotted>`` as the framework's own code makes it, leaving ``sys.modules`` as it was.

    Unlike :func:`load_isolated`, which runs the adapter's own file alone, every parent package's ``__init__`` runs
    too: what the framework's top package does when its adapter is imported (configure logging, read the
    environment, patch Megatron from a parent) happens in the framework's process, so it is observed. Every module
    of ``rerun_from`` (default: the framework's top package) already imported (by loading the subject) is hidden for
    the import, so that each body runs again; all are put back afterwards. Exceptions propagate after the restore.
    """
    package = rerun_from or dotted.partition(".")[0]
    with isolated_modules() as isolation, _on_sys_path(source_root):
        for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
            del sys.modules[name]
        isolation.root, isolation.own = dotted, (package,)
        module = importlib.import_module(dotted)
        isolation.origin = getattr(module, "__file__", None)
    return module


def adapter_location(spec: str | Path) -> Path:
    """The package directory, or the ``.py`` file, that ``spec`` names, found without importing anything.

    ``spec`` is what ``ADAPTER_PACKAGE`` may be: a path (a string ending in ``.py`` or holding a path separator, or a
    :class:`~pathlib.Path`) to a package directory, its ``__init__.py`` or a module file, returned resolved; or a
    dotted module name, resolved parent by parent through the finders of ``sys.meta_path`` (a parent already in
    ``sys.modules`` is searched through its ``__path__``), so that no package's ``__init__`` runs. Raises
    :class:`ModuleNotFoundError` with a one-line message naming ``spec`` when it cannot be found, and
    :class:`ImportError` when it is found but cannot be loaded from Python source (a directory without
    ``__init__.py``, a namespace package, an extension module).
    """
    source, package_dir, _, _ = _resolve(spec)
    return package_dir or source


def adapter_import_root(spec: str | Path) -> tuple[Path, str]:
    """Where a plain ``import`` finds what ``spec`` names: the directory to have on ``sys.path``, and the dotted name.

    For a path, the name is the chain of packages (directories with an ``__init__.py``) that hold it, and the
    directory the one that holds the outermost: ``.../src/myframework/megatron_adapter`` gives ``(.../src,
    "myframework.megatron_adapter")``. For a module name, it is the name itself and the directory that holds its
    top-level package or module. Nothing is imported; errors as for :func:`adapter_location`.
    """
    if not isinstance(spec, str) or _is_path_string(spec):
        source, package_dir = _resolve_path(Path(spec))
        return _enclosing_packages(package_dir or source)
    top = _find_spec_without_importing(spec.partition(".")[0], spec)
    if top.has_location and top.origin is not None:
        top_location = Path(top.origin).parent if top.submodule_search_locations is not None else Path(top.origin)
    elif top.submodule_search_locations:
        top_location = Path(next(iter(top.submodule_search_locations)))
    else:
        raise ImportError(f"module {spec!r} is not loaded from a directory (origin {top.origin!r})", name=spec)
    return top_location.parent, spec


def _is_path_string(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _resolve(target: str | Path) -> tuple[Path, Path | None, tuple[str, ...], Path | None]:
    """The source file to execute, the package directory if it is a package, the extra own-name prefixes, and the
    directory to put on ``sys.path`` for the load (``None``: none needed)."""
    if not isinstance(target, str) or _is_path_string(target):
        source, package_dir = _resolve_path(Path(target))
        root, dotted = _enclosing_packages(package_dir or source)
        if "." not in dotted:
            return source, package_dir, (), None
        top = dotted.partition(".")[0]
        return source, package_dir, (top,), None if _importable(top) else root
    spec = _find_spec_without_importing(target, target)
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise ImportError(f"module {target!r} has no Python source file to load (origin {spec.origin!r})", name=target)
    origin = Path(spec.origin)
    package_dir = origin.parent if spec.submodule_search_locations is not None else None
    return origin, package_dir, (target.partition(".")[0],), None


def _find_spec_without_importing(name: str, wanted: str) -> importlib.machinery.ModuleSpec:
    """The spec of module ``name``, found parent by parent without executing any module; ``wanted`` for messages.

    A parent already in ``sys.modules`` is searched through its ``__path__``, as the import system would."""
    if not _MODULE_NAME.fullmatch(name):
        raise ModuleNotFoundError(f"{wanted!r} is neither a path nor a module name", name=wanted)
    parts = name.split(".")
    path: Sequence[str] | None = None
    for end in range(1, len(parts) + 1):
        fullname = ".".join(parts[:end])
        loaded = sys.modules.get(fullname)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else None
        if spec is None and (loaded is None or end == len(parts)):
            spec = _find_one(fullname, path)
            if spec is None:
                missing = f"{fullname!r}" if fullname == wanted else f"{fullname!r} (looking for {wanted!r})"
                raise ModuleNotFoundError(f"No module named {missing}", name=fullname)
        if end < len(parts):
            path = getattr(loaded, "__path__", None) if loaded is not None else spec.submodule_search_locations
            if path is None:
                raise ModuleNotFoundError(
                    f"No module named {wanted!r}: {fullname!r} is not a package", name=".".join(parts[: end + 1])
                )
    assert spec is not None
    return spec


def _find_one(fullname: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
    """What the finders of ``sys.meta_path`` find for ``fullname`` given its parent's ``path``, short of loading it."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec(fullname, path, None) if find_spec is not None else None
        if spec is not None:
            return spec
    return None


def _importable(top: str) -> bool:
    if top in sys.modules:
        return True
    try:
        return _find_one(top, None) is not None
    except (ImportError, ValueError):
        return False


def _enclosing_packages(location: Path) -> tuple[Path, str]:
    """The directory above the packages holding ``location`` (a package directory or module file), and its dotted
    name through them."""
    names = [location.stem]
    directory = location.parent
    while (directory / "__init__.py").is_file() and directory.name.isidentifier():
        names.insert(0, directory.name)
        directory = directory.parent
    return directory, ".".join(names)


@contextmanager
def _on_sys_path(directory: Path | None) -> Iterator[None]:
    """Append ``directory`` to ``sys.path`` for the block, then remove that very entry (and its importer cache)."""
    if directory is None:
        yield
        return
    entry = str(directory)
    cached = entry in sys.path_importer_cache
    sys.path.append(entry)
    try:
        yield
    finally:
        _remove_by_identity(sys.path, entry)
        if not cached and entry not in sys.path:
            sys.path_importer_cache.pop(entry, None)


def _remove_by_identity(entries: list[object], item: object) -> None:
    """Remove the last entry of ``entries`` that is ``item`` itself, leaving equal entries added by others."""
    for at in range(len(entries) - 1, -1, -1):
        if entries[at] is item:
            del entries[at]
            return


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


class _FakeChildFinder:
    """Meta-path finder and loader that make child fake packages below an isolation's fakes on demand.

    It answers only for a name whose parent is, in ``sys.modules``, one of the isolation's :class:`FakeModule` fakes
    or a child it made, and that the parent does not bind to anything but a fake module of that name (``import
    pkg.function`` fails as it would for real). The child comes from the parent's tree
    (:meth:`~harness.contracts.import_side_effects.fake_modules.FakeModuleTree.make_child`) when the import system
    loads it.
    """

    def __init__(self, fakes: Mapping[str, ModuleType]) -> None:
        self._fakes = fakes
        self.created: dict[str, ModuleType] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        parent_name, _, child = fullname.rpartition(".")
        parent = sys.modules.get(parent_name) if parent_name else None
        if not isinstance(parent, FakeModule):
            return None
        if self._fakes.get(parent_name) is not parent and self.created.get(parent_name) is not parent:
            return None
        bound = vars(parent).get(child, _ABSENT)
        if bound is not _ABSENT and not (isinstance(bound, FakeModule) and bound.__name__ == fullname):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin="fake", is_package=True)
        spec.loader_state = object.__getattribute__(parent, "_fake_tree")
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = spec.loader_state.make_child(spec.name)
        if module is None:
            raise ModuleNotFoundError(f"No module named {spec.name!r} (not a fake package)", name=spec.name)
        self.created[spec.name] = module
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to execute; put back the spec the child was made with, so it holds no reference to this finder."""
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None, origin="fake", is_package=True)
        module.__loader__ = None
