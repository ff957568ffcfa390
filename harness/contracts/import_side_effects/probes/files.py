"""The probes of where Python finds and leaves files: files and directories under the watched root (``file``) and
``sys.path``, ``sys.meta_path`` and ``sys.path_hooks`` (``sys-path``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from stat import S_ISDIR
from typing import NamedTuple

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect, describe

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".nox",
        ".tox",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        ".hypothesis",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)


class SysPathProbe(Probe):
    """``sys.path``, ``sys.meta_path`` and ``sys.path_hooks`` changed: every later import of the process resolves
    otherwise."""

    kinds = ("sys-path",)
    _LISTS = ("path", "meta_path", "path_hooks")

    def start(self) -> None:
        self._before = {name: list(getattr(sys, name)) for name in self._LISTS}

    def stop(self) -> None:
        self._after = {name: list(getattr(sys, name)) for name in self._LISTS}

    def effects(self) -> Iterator[SideEffect]:
        for name in self._LISTS:
            before, after = self._before[name], self._after[name]
            by_value = name == "path"
            old = [entry if by_value else id(entry) for entry in before]
            new = [entry if by_value else id(entry) for entry in after]
            changes = [f"added at {at}: {describe(entry)}" for at, entry in enumerate(after) if new[at] not in old]
            changes += [f"removed: {describe(entry)}" for at, entry in enumerate(before) if old[at] not in new]
            if not changes and old != new:
                changes.append("reordered")
            for change in changes:
                yield SideEffect("sys-path", f"sys.{name}", change)


class _FileEntry(NamedTuple):
    is_dir: bool
    size: int
    mtime_ns: int


class FileProbe(Probe):
    """Files created, changed or removed below the root the caller names (the working directory when it names
    none): an import that writes files leaves them in every checkout that imports it."""

    kinds = ("file",)

    def __init__(self, root: Path | None) -> None:
        self._root = root

    def start(self) -> None:
        self._root = (self._root or Path.cwd()).resolve()
        self._before = _listing(self._root)

    def stop(self) -> None:
        self._after = _listing(self._root)

    def effects(self) -> Iterator[SideEffect]:
        for path, entry in self._after.items():
            old = self._before.get(path)
            if old is None:
                yield SideEffect("file", path, "directory created" if entry.is_dir else "created")
            elif not entry.is_dir and (old.size, old.mtime_ns) != (entry.size, entry.mtime_ns):
                yield SideEffect("file", path, "modified")
        for path in sorted(self._before.keys() - self._after.keys()):
            yield SideEffect("file", path, "deleted")


def _listing(root: Path) -> dict[str, _FileEntry]:
    listing = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if name not in SKIPPED_DIRS)
        base = Path(directory)
        for name in (*dirnames, *filenames):
            path = base / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            entry = _FileEntry(S_ISDIR(stat.st_mode), stat.st_size, stat.st_mtime_ns)
            listing[path.relative_to(root).as_posix()] = entry
    return listing
