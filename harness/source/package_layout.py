"""Which files below a folder are a framework's modules, and under which dotted names, as Python would import them.

Every layout Python imports is read: regular packages (``__init__.py``), implicit namespace packages (PEP 420: any
folder whose name is an identifier is a package once its parent is on the path, ``__init__.py`` or not), a ``src/``
folder (a path entry, not a package), single-module distributions, and a folder scanned on its own whose package
lives in a namespace above it (``megatron/bridge`` scanned as ``bridge/``: its own imports say ``megatron.bridge``).
Tests, checks and build folders are not the framework's runtime code.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from harness.source.parsing import unreadable

NOT_RUNTIME = frozenset(
    {"tests", "test", "checks", "docs", "build", "dist", "__pycache__", ".nox", ".venv", "venv", "site-packages"}
)
"""Folders whose files are never the framework's runtime modules."""
PATH_ENTRY = "src"
"""A folder of this name without ``__init__.py`` holds the top-level packages (the ``src/`` layout)."""


def framework_files(root: Path, packages: Collection[str] | None = None) -> dict[Path, str]:
    """Every ``.py`` file below ``root`` that Python imports as a module, with its dotted name. ``packages``
    (top-level package and module names) keeps only a distribution's own files, where ``root`` is a
    ``site-packages`` holding others. A file no Python this interpreter parses is left out, and named by
    :func:`unreadable_files`."""
    base, modules = _modules(root, packages)
    prefix = _namespace_prefix(base, modules)
    named = {path: ".".join([*prefix, *parts]) for path, parts in modules.items()}
    return {path: name for path, name in named.items() if name and unreadable(path) is None}


def unreadable_files(root: Path, packages: Collection[str] | None = None) -> list[str]:
    """Why each file :func:`framework_files` leaves out cannot be parsed (``<file>:<line>: SyntaxError: ...``): a
    finding of the scan, never a silent gap."""
    return [why for path in _modules(root, packages)[1] if (why := unreadable(path))]


def _modules(root: Path, packages: Collection[str] | None) -> tuple[Path, dict[Path, list[str]]]:
    """The folder module names count from, and every module file below it with its dotted parts."""
    base = root / PATH_ENTRY if _is_path_entry(root / PATH_ENTRY) and packages is None else root
    found = (
        sorted(base.rglob("*.py"))
        if packages is None
        else sorted(
            path
            for package in packages
            for path in [*(base / package).rglob("*.py"), base / f"{package}.py"]
            if path.is_file()
        )
    )
    return base, {path: parts for path in found if (parts := _module_parts(path.relative_to(base))) is not None}


PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
"""A folder holding one of these builds a distribution: it is what goes on ``sys.path``, never a package."""


def is_project_root(folder: Path) -> bool:
    return any((folder / name).is_file() for name in PROJECT_FILES)


def _is_path_entry(folder: Path) -> bool:
    return folder.is_dir() and not (folder / "__init__.py").is_file()


def _module_parts(relative: Path) -> list[str] | None:
    """The dotted parts of the module a file below the base is (none for the base's own ``__init__.py``, named by the
    packages above it); None for a file no import reaches (a folder or file name that is no identifier, a test, a
    build folder)."""
    folders = list(relative.parent.parts)
    if NOT_RUNTIME & set(folders) or relative.name.startswith("test_"):
        return None
    stem = [] if relative.name == "__init__.py" else [relative.stem]
    parts = [*folders, *stem]
    return parts if all(part.isidentifier() for part in parts) else None


def _namespace_prefix(base: Path, modules: dict[Path, list[str]]) -> list[str]:
    """The dotted names of the packages ``base`` itself lies in: its own folder and those above it while they hold
    ``__init__.py``, then the namespace folders above those that the framework's own imports name (a file under
    ``bridge/`` importing ``megatron.bridge.models`` places ``bridge`` under ``megatron``). Empty where ``base``
    is a path entry (a project's root, which builds it, even with an ``__init__.py`` of its own; a
    ``site-packages``)."""
    if is_project_root(base):
        return []
    prefix: list[str] = []
    folder = base
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        prefix.insert(0, folder.name)
        folder = folder.parent
    tops = {parts[0] for parts in modules.values() if parts}
    texts = [path.read_text(errors="replace") for path in modules]
    while folder.name.isidentifier() and folder != folder.parent:
        heads = [".".join([folder.name, *prefix])] if prefix else [f"{folder.name}.{top}" for top in tops]
        pattern = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(map(re.escape, heads))})\b", re.MULTILINE)
        if not heads or not any(pattern.search(text) for text in texts):
            break
        prefix.insert(0, folder.name)
        folder = folder.parent
    return prefix
