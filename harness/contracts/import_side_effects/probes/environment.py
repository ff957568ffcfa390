"""The probe of the process environment (``env-read``, ``env-write``): ``os.environ`` and ``os.environb`` are swapped
for mappings over the same data that note which variables are read and by whom; values are never reported."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect, describe, shorten

_ENVIRON_PLUMBING = frozenset({"os", "_collections_abc", "collections.abc", __name__})
"""Modules whose frames stand between a read of the environment and the code that asked for it: ``os.getenv``,
``Mapping.get`` and ``__contains__`` (whose module calls itself ``collections.abc``), this module's recording
mapping."""


class _EnvRead(NamedTuple):
    present: bool
    where: str | None


def _reader() -> str | None:
    """``file:line`` of the first frame outside the environment's plumbing: the code that read the variable."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _ENVIRON_PLUMBING:
        frame = frame.f_back
    return None if frame is None else f"{_source_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def _source_path(filename: str) -> str:
    """``filename`` below the longest ``sys.path`` entry that holds it (``pkg/mod.py``: the module it is), else as
    it is."""
    best = ""
    for entry in sys.path:
        root = os.path.join(os.path.abspath(entry or os.curdir), "")
        if filename.startswith(root) and len(root) > len(best):
            best = root
    return filename[len(best) :] if best else filename


class _RecordingEnviron(os._Environ):  # type: ignore[type-arg]
    """An ``os.environ`` over the same data as the real one that notes which variables are read, and where first."""

    def __init__(self, real: Any, reads: dict[str, _EnvRead]) -> None:
        super().__init__(real._data, real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
        self._reads = reads

    def __getitem__(self, key: Any) -> Any:
        try:
            value = super().__getitem__(key)
        except KeyError:
            self._record(key, present=False)
            raise
        self._record(key, present=True)
        return value

    def __iter__(self) -> Iterator[Any]:
        self._record("*", present=True)
        return super().__iter__()

    def _record(self, key: object, *, present: bool) -> None:
        name = os.fsdecode(key) if isinstance(key, bytes) else str(key)
        if name not in self._reads:
            self._reads[name] = _EnvRead(present, _reader())


class EnvironProbe(Probe):
    """Environment variables read or written, each read with the file and line that made it (a declaration waives a
    read by name, and the waiver names where it happened)."""

    kinds = ("env-read", "env-write")
    _MAPPINGS = tuple(name for name in ("environ", "environb") if hasattr(os, name))

    def __init__(self) -> None:
        self._reads: dict[str, _EnvRead] = {}
        self._replaced: dict[str, object] = {}
        self._stack = ExitStack()

    def start(self) -> None:
        self._real = os.environ
        self._before = dict(self._real)
        self._installed: dict[str, object] = {}
        for name in self._MAPPINGS:
            original = getattr(os, name)
            self._stack.callback(setattr, os, name, original)
            setattr(os, name, _RecordingEnviron(original, self._reads))
            self._installed[name] = getattr(os, name)

    def stop(self) -> None:
        for name, installed in self._installed.items():
            current = getattr(os, name)
            if current is not installed:
                self._replaced[name] = current
        self._stack.close()
        self._after = dict(self._real)

    def effects(self) -> Iterator[SideEffect]:
        for name, (present, where) in self._reads.items():
            at = f" at {where}" if where else ""
            if name == "*":
                yield SideEffect("env-read", name, shorten(f"the whole environment was enumerated{at}"))
            else:
                yield SideEffect("env-read", name, shorten(f"{'read (set)' if present else 'read (unset)'}{at}"))
        before, after = self._before, self._after
        for name, value in after.items():
            if name not in before:
                yield SideEffect("env-write", name, "set")
            elif before[name] != value:
                yield SideEffect("env-write", name, "changed")
        for name in sorted(before.keys() - after.keys()):
            yield SideEffect("env-write", name, "deleted")
        for name, replacement in self._replaced.items():
            detail = f"replaced by {describe(replacement)}; the real one was put back"
            yield SideEffect("env-write", f"os.{name}", detail)
