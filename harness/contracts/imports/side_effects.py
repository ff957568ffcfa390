"""Detecting what a call -- typically an isolated import of an adapter package -- changed in the process.

An adapter package that patches Megatron, configures logging, reads or writes the environment, starts threads or
installs process-wide hooks as a mere consequence of being imported changes training for everyone who imports it.
The detector snapshots the process before and after the call, instruments the few entry points where a change leaves
no trace in a snapshot, and reports every difference as a :class:`SideEffect` naming its kind, what changed and how.

Watched modules: the loaded modules under :data:`_WATCHED_BY_DEFAULT` and under the caller's ``watch_modules`` when
the detector starts, plus every fake module of an isolated load (see :mod:`harness.contracts.imports.isolation`)
that runs during the call. Watched classes: every class bound in a watched module (also one defined elsewhere, such
as a ``torch._C`` type bound in ``torch.distributed``), plus ``torch.Tensor`` when torch is imported. A class or
function bound under several names is reported under the binding that matches its own ``__module__`` and
``__qualname__`` when there is one, else under the first one found.

Kinds (:data:`KINDS`):

``module-attribute``
    An attribute added, deleted or re-bound (compared by identity) on a watched module.
``sys-modules``
    A module imported for the first time, removed or replaced, other than the package's own (``own_prefix``, and
    the root of each isolated load), the caller's ``allowed_imports`` and the standard library. Modules an isolated
    load imported are reported although the isolation removed them again.
``sys-path``
    ``sys.path``, ``sys.meta_path`` or ``sys.path_hooks`` changed.
``log-record``
    A record handled by any logger -- seen through :meth:`logging.Logger.handle`, so loggers that do not propagate
    count too. Records below a logger's level are never created and are not seen. Named by the logger; the record's
    message is :attr:`SideEffect.message`, which the allowance kind ``log-message`` matches (see below).
``logger-config``
    A logger's level, handlers, filters, ``propagate`` or ``disabled`` changed (a new logger counts when its
    configuration is not the default); a handler's level, formatter or filters changed; ``logging.disable``, the
    logger class or the record factory changed.
``warning``
    A warning issued (all are recorded, whatever the filters say), or a change to ``warnings.filters`` (name
    ``warnings.filters``), which the detector undoes when it ends.
``env-read`` / ``env-write``
    A variable read through ``os.environ`` / ``os.environb`` (``os.getenv``, ``.get``, ``[...]``, ``in``;
    enumerating the whole environment is reported as ``*``), or set, changed or deleted. Values are never reported:
    they may be secrets. A read names the file and line of its first reader outside ``os`` (the path below the
    ``sys.path`` entry that holds it), so a red or a waiver says which module reads the variable.
``thread``
    A thread started through :meth:`threading.Thread.start` or ``_thread.start_new_thread``.
``process``
    A child process started through :class:`subprocess.Popen`, ``os.fork``, ``os.forkpty``, ``os.system`` or
    ``os.posix_spawn[p]``, or a child of this process that appeared in ``/proc`` by any other way.
``cuda-init``
    ``torch.cuda.is_initialized()`` flipped; checked only if torch was imported before the call.
``file``
    A file or directory created, deleted or modified under the working directory (or ``file_root``), not looking
    into :data:`_SKIPPED_DIRS`.
``function-state``
    The ``__code__``, ``__defaults__`` or ``__kwdefaults__`` of a function swapped in place (by identity; a
    ``__kwdefaults__`` dict edited in place counts too), for every function reachable from the watched modules:
    their module-level functions and the functions in the ``__dict__`` of the watched classes, including those
    wrapped by ``staticmethod``, ``classmethod`` and ``property``. Patching a function this way leaves every name
    bound to the same object, so ``module-attribute`` cannot see it.
``class-attribute``
    An attribute of a watched class added, deleted or re-bound (by identity), or the ``default`` or
    ``default_factory`` of a dataclass field of one changed (reported once per field, under the class that
    declares it).
``mutable-global``
    A module global of a watched module whose value is a ``dict``, ``list``, ``set``, ``bytearray`` or
    ``collections.deque`` (or a subclass) changed in place, compared against a shallow copy: keys and the identity
    of their values for a dict, items by identity for a list or deque, items by equality for a set. The detail names
    the keys or items added, removed or re-bound, with short values. Process-wide registries that other kinds cover
    (``sys.modules``, ``sys.path``, ``warnings.filters``, ``gc.callbacks``, module namespaces) are left to those.
``process-hook``
    A process-wide hook installed or changed: an ``atexit`` registration (``atexit.register`` is instrumented, and
    ``atexit._ncallbacks()`` compared for registrations below it), a signal handler (``signal.getsignal`` over
    ``signal.valid_signals()``), an interval timer armed or changed (``signal.getitimer`` of ``ITIMER_REAL``,
    ``ITIMER_VIRTUAL`` and ``ITIMER_PROF``; ``signal.alarm`` arms ``ITIMER_REAL``), ``gc.callbacks`` (by identity),
    the trace or profile function of the calling thread (``sys.settrace``/``sys.setprofile``) or for new threads
    (``threading.settrace``/``threading.setprofile``), ``sys.excepthook``, ``threading.excepthook``,
    ``sys.unraisablehook`` or ``sys.displayhook``. The detector reports these and does not undo them in general, but
    so that a broken adapter cannot derail the rest of a test run it puts back the trace and profile functions,
    disarms a timer the block armed (and re-arms one the block changed to about where it was) and restores the
    signal handlers the block changed; ``atexit`` registrations, ``gc.callbacks`` and the exception and display
    hooks stay as the block left them.

Allowances are per name, never per kind alone: ``allow`` maps a kind to ``fnmatch`` patterns matched against
:attr:`SideEffect.name` (``{"env-read": ["SLIME_*"], "class-attribute": ["deep_ep.Buffer.__init__"]}``). One key is
no kind of its own but another way to name an effect (:data:`~harness.formats.effect_kinds.MESSAGE_ALLOWANCES`):
``log-message`` patterns are matched against a log record's whole message, for a record a framework logs through a
logger it shares with others (the root logger, ``megatron``'s), which a pattern of logger names could only waive
wholesale. Every probe always runs; an effect that matches an allowance is moved from ``effects`` to ``allowed``, so
the caller can record which waivers were used.

What is compared is bounded on purpose; the following could be observed from Python but is not: modules and
classes that are not watched; the state of instances (the attributes of a process-group object); containers deeper
than one level (an object inside a watched dict, the contents of a function's default values) and mutable globals
that are not builtin containers; other interpreter settings (``gc`` thresholds, the recursion limit, the switch
interval, the working directory); files outside ``file_root``; reads through a reference to the real ``os.environ``
taken before the call. The instrumentation is process-wide and not thread-safe. A module that binds ``os.environ``
during the call (``from os import environ``) keeps the instrumented mapping, which shares its data with the real one.

What cannot be seen, because Python offers no way to observe it (short of reading process memory or calling into
libc through ``ctypes``, which the detector does not do):

* Environment changes and reads below ``os.environ`` (``os.putenv``/``os.unsetenv``, C ``setenv``/``getenv``):
  ``os.environ`` is a copy taken at startup that such calls do not update, and Python has no call that lists the
  C environment.
* State held by native code: signal handlers installed in C (``sigaction`` from an extension,
  ``faulthandler.register``) -- ``signal.getsignal`` reports only what Python installed; the ``faulthandler``
  watchdog (``dump_traceback_later``); C ``atexit``/``Py_AtExit`` handlers; settings inside CUDA, NCCL, cuBLAS or
  torch's C++ dispatcher beyond ``torch.cuda.is_initialized()``. None of them has a Python API that lists it.
* Audit hooks (``sys.addaudithook``): by design (PEP 578) they can be neither listed nor removed.
* Trace and profile functions set on other threads: Python reads only the calling thread's (``sys.gettrace``) and
  the one for threads started later (``threading.gettrace``).
* Threads and processes started by native code that end before the call does: they leave no record (a live native
  child process is seen in ``/proc``, see ``process``).
"""

from __future__ import annotations

import _thread
import atexit
import collections
import dataclasses
import functools
import gc
import logging
import os
import reprlib
import signal
import subprocess
import sys
import threading
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from stat import S_ISDIR
from types import BuiltinFunctionType, CodeType, FunctionType, MappingProxyType, MethodType, ModuleType, TracebackType
from typing import Any, NamedTuple

from harness.contracts.imports.isolation import Isolation, observe_isolations
from harness.formats.effect_kinds import ALLOWANCE_KINDS, KINDS, MESSAGE_ALLOWANCES

_WATCHED_BY_DEFAULT = ("megatron", "torch.distributed")
_SKIPPED_DIRS = frozenset(
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
# Written by the interpreter itself on first use (warning registries, lazily created annotations, protocol caches,
# the slot names copyreg caches on a class the first time one of its instances is copied or pickled).
_IGNORED_ATTRIBUTES = frozenset(
    {"__warningregistry__", "__annotations__", "__protocol_attrs__", "__non_callable_proto_members__", "__slotnames__"}
)
_MISSING = object()
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_MAX_DETAIL = 200
_ALLOW_EXAMPLE = "{'env-read': ['SLIME_*'], 'class-attribute': ['deep_ep.Buffer.__init__']}"

Allowances = Mapping[str, Collection[str]]
"""Per-name allowances: kind -> ``fnmatch`` patterns matched against :attr:`SideEffect.name`."""


@dataclass(frozen=True)
class SideEffect:
    """One change a call made: its kind (one of :data:`KINDS`), what changed, and how. ``message`` is the whole text
    an allowance by message matches (a log record's message, never shortened); it takes no part in equality."""

    kind: str
    name: str
    detail: str
    message: str = dataclasses.field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}"


def format_effects(effects: Iterable[SideEffect]) -> str:
    """One ``kind name: detail`` line per effect, for a failure message."""
    return "\n".join(str(effect) for effect in effects) or "no side effects"


def detect(
    fn: Callable[[], object],
    *,
    allow: Allowances | None = None,
    watch_modules: Collection[str] = (),
    allowed_imports: Collection[str] = (),
    own_prefix: str | None = None,
    file_root: str | Path | None = None,
) -> list[SideEffect]:
    """Call ``fn`` and return what it changed that ``allow`` does not waive; an exception from ``fn`` propagates
    (see :class:`SideEffectDetector`)."""
    return detect_with_allowances(
        fn,
        allow=allow,
        watch_modules=watch_modules,
        allowed_imports=allowed_imports,
        own_prefix=own_prefix,
        file_root=file_root,
    )[0]


def detect_with_allowances(
    fn: Callable[[], object],
    *,
    allow: Allowances | None = None,
    watch_modules: Collection[str] = (),
    allowed_imports: Collection[str] = (),
    own_prefix: str | None = None,
    file_root: str | Path | None = None,
) -> tuple[list[SideEffect], list[SideEffect]]:
    """Call ``fn`` and return what it changed as ``(effects, allowed)``: the effects no allowance matches, and those
    one does (the waivers used). An exception from ``fn`` propagates."""
    with SideEffectDetector(
        allow=allow,
        watch_modules=watch_modules,
        allowed_imports=allowed_imports,
        own_prefix=own_prefix,
        file_root=file_root,
    ) as detector:
        fn()
    return detector.effects, detector.allowed


def _allowances(allow: object) -> dict[str, tuple[str, ...]]:
    """``allow`` checked and normalised; an empty list or tuple (the old, per-kind form with nothing in it) is none."""
    if allow is None:
        return {}
    if not isinstance(allow, Mapping):
        given = [allow] if isinstance(allow, (str, bytes)) else list(allow)  # type: ignore[call-overload]
        if not given:
            return {}
        example = {str(kind): ["<name pattern>"] for kind in given}
        raise ValueError(
            f"side-effect allowances are per name, never per kind alone: instead of the kinds {given!r} pass a mapping "
            f"of kind to fnmatch patterns of the names to allow, e.g. {example!r} or {_ALLOW_EXAMPLE}"
        )
    unknown = [kind for kind in allow if kind not in ALLOWANCE_KINDS]
    if unknown:
        raise ValueError(f"unknown side-effect kinds {sorted(map(repr, unknown))}; known: {', '.join(ALLOWANCE_KINDS)}")
    normalised = {}
    for kind, patterns in allow.items():
        if isinstance(patterns, (str, bytes)) or not all(isinstance(pattern, str) for pattern in patterns):
            raise ValueError(
                f"allowances for {kind!r} must be a list of name patterns, e.g. [{patterns!r}], not {patterns!r}"
            )
        normalised[kind] = tuple(patterns)
    return normalised


class SideEffectDetector:
    """Context manager whose ``effects`` list, filled on exit, holds what the block changed, in :data:`KINDS` order.

    ``allow`` maps kinds to ``fnmatch`` patterns of names a downstream declared acceptable: a matching effect goes to
    the ``allowed`` list instead of ``effects`` (every probe runs whatever is allowed). The old form, a list of
    kinds, raises ``ValueError``: allowances are per name. ``watch_modules`` and ``allowed_imports`` are module
    names, each covering its submodules too; ``own_prefix`` names the package whose own modules are not reported as
    imports; ``file_root`` is the directory watched for files (the working directory on entry by default). A detector
    is used once; on exit it puts back everything it instrumented, also when the block raises, and lets the
    exception propagate.
    """

    def __init__(
        self,
        *,
        allow: Allowances | None = None,
        watch_modules: Collection[str] = (),
        allowed_imports: Collection[str] = (),
        own_prefix: str | None = None,
        file_root: str | Path | None = None,
    ) -> None:
        self.allow: Mapping[str, tuple[str, ...]] = MappingProxyType(_allowances(allow))
        self.effects: list[SideEffect] = []
        self.allowed: list[SideEffect] = []
        watch = tuple(watch_modules)
        self._probes: list[_Probe] = [
            _FileProbe(Path(file_root) if file_root is not None else None),
            _ModuleProbe(watch, tuple(allowed_imports), own_prefix),
            _FunctionStateProbe(watch),
            _ClassProbe(watch),
            _MutableGlobalProbe(watch),
            _SysPathProbe(),
            _CudaProbe(),
            _ProcessProbe(),
            _ThreadProbe(),
            _LoggingProbe(),
            _WarningProbe(),
            _EnvironProbe(),
            _ProcessHookProbe(),
        ]
        self._stack: ExitStack | None = None

    def __enter__(self) -> SideEffectDetector:
        if self._stack is not None:
            raise RuntimeError("a SideEffectDetector can be entered only once")
        with ExitStack() as starting:
            for probe in self._probes:
                probe.start()
                starting.callback(probe.stop)
            self._stack = starting.pop_all()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._stack is not None
        self._stack.close()
        effects = sorted(
            (effect for probe in self._probes for effect in probe.effects()),
            key=lambda effect: KINDS.index(effect.kind),
        )
        self.effects = [effect for effect in effects if not self._is_allowed(effect)]
        self.allowed = [effect for effect in effects if self._is_allowed(effect)]

    def _is_allowed(self, effect: SideEffect) -> bool:
        return allowance_for(effect, self.allow) is not None


def allowance_for(effect: SideEffect, allow: Mapping[str, Collection[str]]) -> str | None:
    """The first pattern of ``allow`` that waives ``effect``, or None: what a caller records as the waiver used.

    A pattern of the effect's own kind matches its name and is returned as it is; a ``log-message`` pattern matches
    a log record's message and is returned as ``log-message '<pattern>'``, so the record says which way it was
    waived."""
    by_name = next((pattern for pattern in allow.get(effect.kind, ()) if fnmatchcase(effect.name, pattern)), None)
    if by_name is not None:
        return by_name
    for key, kind in MESSAGE_ALLOWANCES.items():
        if kind == effect.kind:
            for pattern in allow.get(key, ()):
                if fnmatchcase(effect.message, pattern):
                    return f"{key} {pattern!r}"
    return None


class _Probe(ABC):
    """Snapshots and instruments one area of the process; ``stop`` undoes everything ``start`` did."""

    kinds: tuple[str, ...] = ()

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def effects(self) -> Iterator[SideEffect]: ...


def _replace(stack: ExitStack, owner: object, name: str, value: object) -> Any:
    """Bind ``owner.name`` to ``value`` until ``stack`` closes; return the original."""
    original = vars(owner)[name]
    setattr(owner, name, value)
    stack.callback(setattr, owner, name, original)
    return original


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


def _describe(value: object) -> str:
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
        return _describe_code(value)  # type: ignore[arg-type]
    if issubclass(kind_of, property):
        return f"<property of {_describe(value.fget)}>"  # type: ignore[attr-defined]
    wrapped = getattr(value, "__func__", None) if issubclass(kind_of, (staticmethod, classmethod)) else None
    if wrapped is None and kind_of.__name__ == "instancemethod":  # C-level methods, as in pybind11 classes
        wrapped = getattr(value, "__func__", None)
    if wrapped is not None:
        return f"<{kind_of.__name__} of {_describe(wrapped)}>"
    if value is dataclasses.MISSING:
        return "MISSING"
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def _describe_code(code: CodeType) -> str:
    parts = Path(code.co_filename).parts
    where = "/".join(parts[-3:]) if len(parts) > 3 else code.co_filename
    return f"<code {code.co_name} at {where}:{code.co_firstlineno}>"


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL else f"{text[: _MAX_DETAIL - 3]}..."


def _namespace(owner: object) -> dict[str, Any] | None:
    """The ``__dict__`` of a module or class, or ``None`` where it has none (or will not say)."""
    try:
        namespace = vars(owner)
    except Exception:
        return None
    if isinstance(namespace, MappingProxyType):
        return dict(namespace)
    return namespace if isinstance(namespace, dict) else None


def _home_name(value: object) -> str | None:
    """``module.qualname`` of a class or function: the binding a report prefers when it is bound under several."""
    try:
        module, qualname = value.__module__, value.__qualname__  # type: ignore[attr-defined]
    except Exception:
        return None
    return f"{module}.{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


class _WatchingProbe(_Probe):
    """A probe over the watched modules: those loaded at start under the watched prefixes, and the fakes of every
    isolated load that starts before the probe stops (see :meth:`_watch`)."""

    def __init__(self, watch: tuple[str, ...]) -> None:
        self._watched = (*_WATCHED_BY_DEFAULT, *watch)
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


class _ModuleProbe(_WatchingProbe):
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
            yield from _namespace_changes(namespace.name, namespace.before, dict(vars(namespace.owner)))
        yield from self._module_changes()

    def _module_changes(self) -> Iterator[SideEffect]:
        before, after = self._before, self._after
        reported = set()
        for name, module in after.items():
            if name not in before and not self._is_expected(name, ()):
                reported.add(name)
                yield SideEffect("sys-modules", name, f"imported: {_describe(module)}")
            elif name in before and before[name] is not module:
                yield SideEffect("sys-modules", name, f"replaced: {_describe(before[name])} -> {_describe(module)}")
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


def _namespace_changes(
    prefix: str, before: dict[str, object], after: dict[str, object], kind: str = "module-attribute"
) -> Iterator[SideEffect]:
    for attribute in [*before, *(name for name in after if name not in before)]:
        old, new = before.get(attribute, _MISSING), after.get(attribute, _MISSING)
        if old is new or attribute in _IGNORED_ATTRIBUTES:
            continue
        name = f"{prefix}.{attribute}"
        if old is _MISSING:
            if issubclass(type(new), ModuleType) and getattr(new, "__name__", None) == name:
                continue  # the import system binding a newly imported submodule: reported as sys-modules
            yield SideEffect(kind, name, f"added: {_describe(new)}")
        elif new is _MISSING:
            yield SideEffect(kind, name, f"deleted: {_describe(old)}")
        else:
            yield SideEffect(kind, name, f"re-bound: {_describe(old)} -> {_describe(new)}")


class _Reach:
    """The classes bound in some modules and the functions reachable from them, each under one name.

    A function is reachable as a module attribute or from a class's ``__dict__`` (directly, or wrapped by
    ``staticmethod``, ``classmethod`` or ``property``). Each object is named by the first binding seen, unless a
    later one matches its home (:func:`_home_name`) and the first does not; a function found in a class is named
    after the class's final name. Home names are only looked up when an object is seen a second time. The tables are
    flat dicts of plain values, so that a snapshot of thousands of functions adds few objects for the garbage
    collector to traverse.
    """

    def __init__(self, *, functions: bool) -> None:
        self._with_functions = functions
        # By id: the object, and its binding -- a dotted name or, for a function found in a class, (id of the class,
        # label); whether that binding is the object's home, once looked up.
        self.classes: dict[int, type] = {}
        self.functions: dict[int, FunctionType] = {}
        self._bindings: dict[int, str | tuple[int, str]] = {}
        self._at_home: dict[int, bool] = {}

    def add_module(self, name: str, namespace: Mapping[str, object]) -> list[object]:
        """Note the classes and functions bound in a module's namespace; return the ones not seen before."""
        added: list[object] = []
        functions, bindings = self.functions, self._bindings
        for attribute, value in list(namespace.items()):
            kind = type(value)
            if kind is FunctionType:
                if not self._with_functions:
                    continue
                key = id(value)
                if key not in functions:
                    functions[key] = value  # type: ignore[assignment]
                    bindings[key] = f"{name}.{attribute}"
                    added.append(value)
                else:
                    self._seen_again(value, f"{name}.{attribute}")
            elif issubclass(kind, type):
                added.extend(self.add_class(f"{name}.{attribute}", value))  # type: ignore[arg-type]
        return added

    def add_class(self, name: str, cls: type) -> list[object]:
        """Note a class bound as ``name`` and, the first time, its functions; return the objects not seen before."""
        if id(cls) in self.classes:
            self._seen_again(cls, name)
            return []
        self.classes[id(cls)] = cls
        self._bindings[id(cls)] = name
        added: list[object] = [cls]
        if self._with_functions:
            for label, function in _class_functions(cls):
                if id(function) not in self.functions:
                    self.functions[id(function)] = function
                    self._bindings[id(function)] = (id(cls), label)
                    added.append(function)
                else:
                    self._seen_again(function, (id(cls), label))
        return added

    def _seen_again(self, value: object, binding: str | tuple[int, str]) -> None:
        key = id(value)
        at_home = self._at_home.get(key)
        if at_home is None:
            at_home = self._at_home[key] = _home_name(value) == self._home_of(self._bindings[key])
        if not at_home and _home_name(value) == self._home_of(binding):
            self._bindings[key], self._at_home[key] = binding, True

    def _home_of(self, binding: str | tuple[int, str]) -> str | None:
        """The home name an object bound this way would have."""
        if isinstance(binding, str):
            return binding
        owner, label = binding
        home = _home_name(self.classes[owner])
        return f"{home}.{label.partition('.')[0]}" if home is not None else None

    def name(self, value: object) -> str:
        """The dotted name of a class or function noted here."""
        binding = self._bindings[id(value)]
        if isinstance(binding, tuple):
            owner, label = binding
            return f"{self.name(self.classes[owner])}.{label}"
        return binding


def _class_functions(cls: type) -> Iterator[tuple[str, FunctionType]]:
    """``(label, function)`` for the functions in a class's own ``__dict__``, unwrapping static and class methods
    (labelled by the attribute) and properties (``attribute.fget`` and so on)."""
    try:
        items = list(vars(cls).items())
    except Exception:
        return
    for attribute, value in items:
        kind = type(value)
        if kind is FunctionType:
            yield attribute, value
        elif issubclass(kind, (staticmethod, classmethod)):
            function = getattr(value, "__func__", None)
            if type(function) is FunctionType:
                yield attribute, function
        elif issubclass(kind, property):
            for accessor in ("fget", "fset", "fdel"):
                function = getattr(value, accessor, None)
                if type(function) is FunctionType:
                    yield f"{attribute}.{accessor}", function


def _watched_tensor_class() -> type | None:
    """``torch.Tensor`` when torch is imported (looked up without triggering a lazy import)."""
    torch = sys.modules.get("torch")
    tensor = (_namespace(torch) or {}).get("Tensor") if torch is not None else None
    return tensor if isinstance(tensor, type) else None


# What function-state compares, a plain tuple for speed: (__code__, __defaults__, __kwdefaults__, its items).
_FunctionState = tuple[CodeType, "tuple[Any, ...] | None", "dict[str, Any] | None", "tuple[tuple[str, Any], ...]"]


def _function_state(function: FunctionType) -> _FunctionState:
    kwdefaults = function.__kwdefaults__
    return function.__code__, function.__defaults__, kwdefaults, tuple(kwdefaults.items()) if kwdefaults else ()


def _function_changes(old: _FunctionState, new: _FunctionState) -> Iterator[str]:
    (old_code, old_defaults, old_kwdefaults, old_items), (new_code, new_defaults, new_kwdefaults, new_items) = old, new
    if old_code is not new_code:
        yield f"__code__ replaced ({_describe_code(old_code)} -> {_describe_code(new_code)})"
    if old_defaults is not new_defaults and not _same_items(old_defaults or (), new_defaults or ()):
        yield f"__defaults__ replaced ({_describe(old_defaults)} -> {_describe(new_defaults)})"
    same_kwdefaults = len(old_items) == len(new_items) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(old_items, new_items, strict=True)
    )
    if not same_kwdefaults:
        how = "changed in place" if old_kwdefaults is new_kwdefaults else "replaced"
        yield f"__kwdefaults__ {how} ({_describe(dict(old_items) or None)} -> {_describe(dict(new_items) or None)})"


def _same_items(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """The same items, by identity."""
    return len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))


class _ReachingProbe(_WatchingProbe):
    """A probe over what is reachable from the watched modules (their classes, and with ``functions`` their functions
    and the classes' functions), plus ``torch.Tensor`` when torch is loaded; :meth:`_snapshot` records each newly
    reached object."""

    def __init__(self, watch: tuple[str, ...], *, functions: bool) -> None:
        super().__init__(watch)
        self._reach = _Reach(functions=functions)

    def start(self) -> None:
        tensor = _watched_tensor_class()
        if tensor is not None:
            self._snapshot(self._reach.add_class("torch.Tensor", tensor))
        super().start()

    def _watch(self, name: str, module: object) -> None:
        namespace = _namespace(module)
        if namespace is not None:
            self._snapshot(self._reach.add_module(name, namespace))

    @abstractmethod
    def _snapshot(self, added: list[object]) -> None:
        """Record the state of objects reached for the first time."""


class _FunctionStateProbe(_ReachingProbe):
    kinds = ("function-state",)

    def __init__(self, watch: tuple[str, ...]) -> None:
        super().__init__(watch, functions=True)
        self._before: dict[int, _FunctionState] = {}

    def _snapshot(self, added: list[object]) -> None:
        for value in added:
            if type(value) is FunctionType:
                self._before[id(value)] = _function_state(value)

    def effects(self) -> Iterator[SideEffect]:
        for key, old in self._before.items():
            function = self._reach.functions[key]
            for change in _function_changes(old, _function_state(function)):
                yield SideEffect("function-state", self._reach.name(function), _shorten(change))


class _ClassState(NamedTuple):
    cls: type
    namespace: dict[str, object]
    fields: dict[str, tuple[Any, object, object]]  # dataclass field name -> (field, default, default_factory)


class _ClassProbe(_ReachingProbe):
    kinds = ("class-attribute",)

    def __init__(self, watch: tuple[str, ...]) -> None:
        super().__init__(watch, functions=False)
        self._before: list[_ClassState] = []

    def _snapshot(self, added: list[object]) -> None:
        for cls in added:
            namespace = _namespace(cls)
            if namespace is not None:
                self._before.append(_ClassState(cls, namespace, _dataclass_fields(namespace)))  # type: ignore[arg-type]

    def effects(self) -> Iterator[SideEffect]:
        changed_fields: dict[int, list[Any]] = {}  # id(field) -> [name, changes, declared here]
        for state in self._before:
            name = self._reach.name(state.cls)
            after = _namespace(state.cls) or {}
            yield from _namespace_changes(name, state.namespace, after, "class-attribute")
            own_annotations = after.get("__annotations__")
            current = _dataclass_fields(after)
            for field_name, (field, default, factory) in state.fields.items():
                changes = _field_changes(default, factory, current.get(field_name))
                if not changes:
                    continue
                declared_here = isinstance(own_annotations, dict) and field_name in own_annotations
                entry = changed_fields.get(id(field))
                if entry is None or (declared_here and not entry[2]):
                    changed_fields[id(field)] = [f"{name}.{field_name}", changes, declared_here]
        for name, changes, _ in changed_fields.values():
            for change in changes:
                yield SideEffect("class-attribute", name, _shorten(change))


def _dataclass_fields(namespace: Mapping[str, object]) -> dict[str, tuple[Any, object, object]]:
    fields = namespace.get("__dataclass_fields__")
    if not isinstance(fields, dict):
        return {}
    return {
        name: (field, getattr(field, "default", _MISSING), getattr(field, "default_factory", _MISSING))
        for name, field in fields.items()
    }


def _field_changes(default: object, factory: object, now: tuple[Any, object, object] | None) -> list[str]:
    if now is None:
        return ["dataclass field removed"]
    _, new_default, new_factory = now
    changes = []
    if new_default is not default:
        changes.append(f"dataclass default {_describe(default)} -> {_describe(new_default)}")
    if new_factory is not factory:
        changes.append(f"dataclass default_factory {_describe(factory)} -> {_describe(new_factory)}")
    return changes


_CONTAINERS = (dict, list, set, bytearray, collections.deque)
_SKIPPED_GLOBALS = frozenset({"__builtins__", *_IGNORED_ATTRIBUTES})
_SIMPLE_VALUES = (int, float, complex, str, bytes, bool, type(None))


class _Global(NamedTuple):
    name: str
    value: Any
    before: Any
    aliases: list[str]


class _MutableGlobalProbe(_WatchingProbe):
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
        namespace = _namespace(module)
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
            yield SideEffect("mutable-global", entry.name, _shorten(detail))


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
        changes = [
            f"key {_describe(key)} added: {_describe(value)}" for key, value in after.items() if key not in before
        ]
        changes += [
            f"key {_describe(key)} removed (was {_describe(value)})"
            for key, value in before.items()
            if key not in after
        ]
        for key, old in before.items():
            new = after.get(key, _MISSING)
            if new is not _MISSING and new is not old and not _equal_simple(old, new):
                changes.append(f"key {_describe(key)} re-bound: {_describe(old)} -> {_describe(new)}")
        return changes
    if isinstance(before, set):
        return [f"item added: {_describe(item)}" for item in after - before] + [
            f"item removed: {_describe(item)}" for item in before - after
        ]
    if isinstance(before, bytes):
        return [] if before == after else [f"contents changed (length {len(before)} -> {len(after)})"]
    old_ids, new_ids = [id(item) for item in before], [id(item) for item in after]
    changes = [f"item added at {at}: {_describe(item)}" for at, item in enumerate(after) if new_ids[at] not in old_ids]
    changes += [f"item removed: {_describe(item)}" for at, item in enumerate(before) if old_ids[at] not in new_ids]
    if not changes and old_ids != new_ids:
        changes.append(f"reordered (length {len(before)} -> {len(after)})")
    return changes


def _equal_simple(old: object, new: object) -> bool:
    """Equal values of a simple immutable type: re-binding one to an equal copy changes nothing."""
    return type(old) is type(new) and type(old) in _SIMPLE_VALUES and old == new


_BINDING_TYPES = (FunctionType, BuiltinFunctionType, type, ModuleType)


@dataclass(frozen=True, eq=False)
class CallableState:
    """What :func:`capture_callable_state` saw, for :func:`callable_state_changes` to compare.

    ``modules`` are the loaded modules under ``prefixes``; ``bindings`` holds, per module, every attribute bound to
    a function, class or module; ``names`` every attribute name of each module (to tell an added callable from a
    data global re-bound to one); ``functions`` every function reachable from those modules and classes, by
    ``id`` (:meth:`function_name` names one), and ``states`` their ``(__code__, __defaults__, __kwdefaults__, its
    items)``. It keeps references to all of them, so identities stay meaningful.
    """

    prefixes: tuple[str, ...]
    modules: Mapping[str, ModuleType]
    bindings: Mapping[str, Mapping[str, object]]
    names: Mapping[str, frozenset[str]]
    functions: Mapping[int, FunctionType]
    states: Mapping[int, _FunctionState]
    _reach: _Reach = dataclasses.field(repr=False)

    def function_name(self, function: FunctionType) -> str:
        """The dotted name a report uses for one of :attr:`functions` (resolved only when asked: it costs)."""
        return self._reach.name(function)


def capture_callable_state(prefixes: Collection[str]) -> CallableState:
    """Snapshot the callables of the loaded modules under ``prefixes`` (each covering its submodules): the identity
    of each module attribute bound to a function, class or module, and ``__code__``, ``__defaults__`` and
    ``__kwdefaults__`` of those functions and of the functions in those classes' ``__dict__``. Data globals are not
    recorded: Megatron re-binds its process-group globals whenever model parallelism is set up."""
    prefixes = tuple(prefixes)
    exact, dotted = frozenset(prefixes), tuple(f"{prefix}." for prefix in prefixes)
    modules: dict[str, ModuleType] = {}
    bindings: dict[str, dict[str, object]] = {}
    names: dict[str, frozenset[str]] = {}
    reach = _Reach(functions=True)
    for name, module in list(sys.modules.items()):
        if not (name in exact or name.startswith(dotted)) or not issubclass(type(module), ModuleType):
            continue
        namespace = _namespace(module)
        if namespace is None:
            continue
        items = list(namespace.items())
        modules[name] = module
        names[name] = frozenset(attribute for attribute, _ in items)
        bindings[name] = {attribute: value for attribute, value in items if issubclass(type(value), _BINDING_TYPES)}
        reach.add_module(name, bindings[name])
    states = {key: _function_state(function) for key, function in reach.functions.items()}
    return CallableState(prefixes, modules, bindings, names, reach.functions, states, reach)


def callable_state_changes(before: CallableState, after: CallableState) -> list[SideEffect]:
    """What differs between two captures, as ``module-attribute`` and ``function-state`` effects. Only modules
    ``before`` saw are compared (one imported later is not); data globals are not compared at all."""
    effects = []
    for module_name, old_bindings in before.bindings.items():
        module = before.modules[module_name]
        if module_name in after.bindings and after.modules[module_name] is module:
            new_bindings, new_names = after.bindings[module_name], after.names[module_name]
        else:  # gone from sys.modules, or replaced there: compare the module object ``before`` saw, as it is now
            live = _namespace(module) or {}
            new_bindings = {key: value for key, value in live.items() if issubclass(type(value), _BINDING_TYPES)}
            new_names = frozenset(live)
        effects += _binding_changes(
            module, module_name, old_bindings, before.names[module_name], new_bindings, new_names
        )
    for key, function in before.functions.items():
        old = before.states[key]
        new = after.states[key] if after.functions.get(key) is function else _function_state(function)
        if new is old or (new[0] is old[0] and new[1] is old[1] and new[2] is old[2] and not new[3] and not old[3]):
            continue  # the common case, without building the comparison
        name = before.function_name(function)
        effects += [SideEffect("function-state", name, _shorten(change)) for change in _function_changes(old, new)]
    return effects


def _binding_changes(
    module: ModuleType,
    module_name: str,
    old_bindings: Mapping[str, object],
    old_names: frozenset[str],
    new_bindings: Mapping[str, object],
    new_names: frozenset[str],
) -> Iterator[SideEffect]:
    for attribute in [*old_bindings, *(name for name in new_bindings if name not in old_bindings)]:
        old, new = old_bindings.get(attribute, _MISSING), new_bindings.get(attribute, _MISSING)
        if old is new or attribute in _IGNORED_ATTRIBUTES:
            continue
        name = f"{module_name}.{attribute}"
        if old is _MISSING:
            if attribute in old_names:
                detail = f"re-bound: a data value -> {_describe(new)}"
            elif issubclass(type(new), ModuleType) and getattr(new, "__name__", None) == name:
                continue  # the import system binding a newly imported submodule
            else:
                detail = f"added: {_describe(new)}"
        elif new is _MISSING:
            if attribute in new_names:
                detail = f"re-bound: {_describe(old)} -> {_describe((_namespace(module) or {}).get(attribute))}"
            else:
                detail = f"deleted: {_describe(old)}"
        else:
            detail = f"re-bound: {_describe(old)} -> {_describe(new)}"
        yield SideEffect("module-attribute", name, _shorten(detail))


class _SysPathProbe(_Probe):
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
            changes = [f"added at {at}: {_describe(entry)}" for at, entry in enumerate(after) if new[at] not in old]
            changes += [f"removed: {_describe(entry)}" for at, entry in enumerate(before) if old[at] not in new]
            if not changes and old != new:
                changes.append("reordered")
            for change in changes:
                yield SideEffect("sys-path", f"sys.{name}", change)


class _LoggerState(NamedTuple):
    level: int
    handlers: tuple[logging.Handler, ...]
    filters: tuple[object, ...]
    propagate: bool
    disabled: bool


class _HandlerState(NamedTuple):
    level: int
    formatter: object
    filters: tuple[object, ...]


_DEFAULT_LOGGER = _LoggerState(logging.NOTSET, (), (), True, False)


class _LoggingState(NamedTuple):
    loggers: dict[str, _LoggerState]
    handlers: dict[int, tuple[str, logging.Handler, _HandlerState]]
    settings: dict[str, object]

    @classmethod
    def take(cls) -> _LoggingState:
        loggers: dict[str, logging.Logger] = {"root": logging.getLogger()}
        for name, logger in dict(logging.Logger.manager.loggerDict).items():
            if isinstance(logger, logging.Logger):
                loggers[name] = logger
        handlers = {}
        for name, logger in loggers.items():
            for handler in logger.handlers:
                state = _HandlerState(handler.level, handler.formatter, tuple(handler.filters))
                handlers.setdefault(id(handler), (name, handler, state))
        settings = {
            "logging.disable": logging.getLogger().manager.disable,
            "logging.setLoggerClass": logging.getLoggerClass(),
            "logging.setLogRecordFactory": logging.getLogRecordFactory(),
        }
        states = {
            name: _LoggerState(
                logger.level, tuple(logger.handlers), tuple(logger.filters), logger.propagate, logger.disabled
            )
            for name, logger in loggers.items()
        }
        return cls(states, handlers, settings)


class _LoggingProbe(_Probe):
    kinds = ("log-record", "logger-config")

    def __init__(self) -> None:
        self._records: list[logging.LogRecord] = []
        self._stack = ExitStack()

    def start(self) -> None:
        self._before = _LoggingState.take()
        records = self._records

        def handle(logger: logging.Logger, record: logging.LogRecord) -> object:
            records.append(record)
            return original(logger, record)

        original = _replace(self._stack, logging.Logger, "handle", handle)

    def stop(self) -> None:
        self._stack.close()
        self._after = _LoggingState.take()

    def effects(self) -> Iterator[SideEffect]:
        for record in self._records:
            try:
                message = record.getMessage()
            except Exception:
                message = str(record.msg)
            yield SideEffect("log-record", record.name, _shorten(f"{record.levelname}: {message}"), message)
        yield from self._config_changes()

    def _config_changes(self) -> Iterator[SideEffect]:
        before, after = self._before, self._after
        for name, state in after.loggers.items():
            for change in _logger_changes(before.loggers.get(name, _DEFAULT_LOGGER), state):
                yield SideEffect("logger-config", name, change)
        for name in sorted(before.loggers.keys() - after.loggers.keys()):
            yield SideEffect("logger-config", name, "logger removed from the logging manager")
        for key, (name, handler, state) in after.handlers.items():
            if key in before.handlers and before.handlers[key][1] is handler and before.handlers[key][2] != state:
                old = before.handlers[key][2]
                for field in _HandlerState._fields:
                    if getattr(old, field) != getattr(state, field):
                        yield SideEffect("logger-config", name, f"handler {_describe(handler)} {field} changed")
        for setting, value in after.settings.items():
            if before.settings[setting] is not value and before.settings[setting] != value:
                yield SideEffect(
                    "logger-config", setting, f"changed: {_describe(before.settings[setting])} -> {_describe(value)}"
                )


def _logger_changes(old: _LoggerState, new: _LoggerState) -> Iterator[str]:
    if old.level != new.level:
        yield f"level: {logging.getLevelName(old.level)} -> {logging.getLevelName(new.level)}"
    for field in ("handlers", "filters"):
        old_items, new_items = getattr(old, field), getattr(new, field)
        yield from (f"{field[:-1]} added: {_describe(item)}" for item in new_items if not _contains(old_items, item))
        yield from (f"{field[:-1]} removed: {_describe(item)}" for item in old_items if not _contains(new_items, item))
    if old.propagate != new.propagate:
        yield f"propagate: {old.propagate} -> {new.propagate}"
    if old.disabled != new.disabled:
        yield f"disabled: {old.disabled} -> {new.disabled}"


def _contains(items: Iterable[object], item: object) -> bool:
    return any(existing is item for existing in items)


class _WarningProbe(_Probe):
    kinds = ("warning",)

    def start(self) -> None:
        self._catcher = warnings.catch_warnings(record=True)
        self._log = self._catcher.__enter__()
        warnings.simplefilter("always")
        self._filters = list(warnings.filters)

    def stop(self) -> None:
        self._current = list(warnings.filters)
        self._catcher.__exit__(None, None, None)

    def effects(self) -> Iterator[SideEffect]:
        for message in self._log:
            where = f"{message.filename}:{message.lineno}"
            yield SideEffect("warning", message.category.__name__, _shorten(f"{message.message} ({where})"))
        for entry in self._current:
            if entry not in self._filters:
                yield SideEffect("warning", "warnings.filters", f"filter added: {_describe_filter(entry)}")
        for entry in self._filters:
            if entry not in self._current:
                yield SideEffect("warning", "warnings.filters", f"filter removed: {_describe_filter(entry)}")


def _describe_filter(entry: tuple[Any, ...]) -> str:
    action, message, category, module, lineno = entry
    pattern = getattr(message, "pattern", message)
    where = getattr(module, "pattern", module)
    return f"{action} {category.__name__} message={pattern!r} module={where!r} lineno={lineno}"


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


class _EnvironProbe(_Probe):
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
                yield SideEffect("env-read", name, _shorten(f"the whole environment was enumerated{at}"))
            else:
                yield SideEffect("env-read", name, _shorten(f"{'read (set)' if present else 'read (unset)'}{at}"))
        before, after = self._before, self._after
        for name, value in after.items():
            if name not in before:
                yield SideEffect("env-write", name, "set")
            elif before[name] != value:
                yield SideEffect("env-write", name, "changed")
        for name in sorted(before.keys() - after.keys()):
            yield SideEffect("env-write", name, "deleted")
        for name, replacement in self._replaced.items():
            detail = f"replaced by {_describe(replacement)}; the real one was put back"
            yield SideEffect("env-write", f"os.{name}", detail)


class _ThreadProbe(_Probe):
    kinds = ("thread",)

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._raw: list[object] = []
        self._stack = ExitStack()

    def start(self) -> None:
        threads, raw = self._threads, self._raw

        def start_thread(thread: threading.Thread) -> None:
            original_start(thread)
            threads.append(thread)

        def start_new_thread(function: object, *args: Any, **kwargs: Any) -> object:
            raw.append(function)
            return original_start_new_thread(function, *args, **kwargs)

        original_start = _replace(self._stack, threading.Thread, "start", start_thread)
        original_start_new_thread = _replace(self._stack, _thread, "start_new_thread", start_new_thread)

    def stop(self) -> None:
        self._stack.close()
        self._alive = {id(thread) for thread in self._threads if thread.is_alive()}

    def effects(self) -> Iterator[SideEffect]:
        for thread in self._threads:
            state = "started, still running" if id(thread) in self._alive else "started, finished"
            daemon = " (daemon)" if thread.daemon else ""
            target = getattr(thread, "_target", None)
            runs = f", target {_describe(target)}" if target is not None else ""
            yield SideEffect("thread", thread.name, f"{state}{daemon}{runs}")
        for function in self._raw:
            yield SideEffect("thread", "_thread.start_new_thread", f"started {_describe(function)}")


class _Spawn(NamedTuple):
    via: str
    program: str
    command: str
    pid: int | None
    outcome: str


class _ProcessProbe(_Probe):
    kinds = ("process",)
    _OS_ENTRY_POINTS = tuple(
        name for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp") if hasattr(os, name)
    )

    def __init__(self) -> None:
        self._spawns: list[_Spawn] = []
        self._depth = 0
        self._stack = ExitStack()

    def start(self) -> None:
        self._children_before = _child_processes()
        probe = self

        def popen_init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
            probe._depth += 1
            try:
                original_init(popen, args, *rest, **kwargs)
            except BaseException:
                probe._spawns.append(_spawn("subprocess.Popen", args, None, "failed to start"))
                raise
            finally:
                probe._depth -= 1
            probe._spawns.append(_spawn("subprocess.Popen", args, popen.pid, ""))

        original_init = _replace(self._stack, subprocess.Popen, "__init__", popen_init)
        for name in self._OS_ENTRY_POINTS:
            _replace(self._stack, os, name, self._os_wrapper(name, getattr(os, name)))

    def _os_wrapper(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if self._depth:
                return result
            if name == "system":
                self._spawns.append(_spawn("os.system", args[0] if args else "", None, f"exit status {result}"))
            elif name.startswith("posix_spawn"):
                self._spawns.append(_spawn(f"os.{name}", args[1] if len(args) > 1 else args[:1], result, ""))
            else:
                pid = result[0] if isinstance(result, tuple) else result
                if pid != 0:
                    self._spawns.append(_Spawn(f"os.{name}", f"os.{name}", "fork of this process", pid, ""))
            return result

        return wrapper

    def stop(self) -> None:
        self._stack.close()
        self._children_after = _child_processes()

    def effects(self) -> Iterator[SideEffect]:
        known = {spawn.pid for spawn in self._spawns}
        for spawn in self._spawns:
            outcome = spawn.outcome
            if spawn.pid is not None:
                state = "still running" if spawn.pid in self._children_after else "exited"
                outcome = f"pid {spawn.pid}, {state}"
            detail = f"started via {spawn.via}: {spawn.command} ({outcome})"
            yield SideEffect("process", spawn.program, _shorten(detail))
        for pid, command in self._children_after.items():
            if pid not in self._children_before and pid not in known:
                program = Path(command.partition(" ")[0]).name or str(pid)
                yield SideEffect("process", program, _shorten(f"child process {pid} appeared: {command}"))


def _spawn(via: str, args: Any, pid: int | None, outcome: str) -> _Spawn:
    """A record of a started program; ``args`` is a command string or an argument sequence, as ``Popen`` takes."""
    if isinstance(args, (str, bytes, os.PathLike)):
        command = os.fsdecode(args)
        program = command.split(maxsplit=1)[0] if command.strip() else command
    else:
        parts = [os.fsdecode(part) if isinstance(part, (str, bytes, os.PathLike)) else repr(part) for part in args]
        command = " ".join(parts)
        program = parts[0] if parts else ""
    return _Spawn(via, Path(program).name or program, command, pid, outcome)


def _child_processes() -> dict[int, str]:
    """Children of this process by pid, with their command lines, read from ``/proc`` (empty where there is none)."""
    children = {}
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rpartition(")")[2].split()
            if int(fields[1]) != me:
                continue
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except (OSError, IndexError, ValueError):
            continue
        children[int(entry)] = os.fsdecode(command) or stat.partition("(")[2].rpartition(")")[0]
    return children


class _CudaProbe(_Probe):
    kinds = ("cuda-init",)

    def start(self) -> None:
        self._torch = sys.modules.get("torch")
        self._before = _cuda_initialized(self._torch)

    def stop(self) -> None:
        self._after = _cuda_initialized(self._torch)

    def effects(self) -> Iterator[SideEffect]:
        if self._before is False and self._after:
            yield SideEffect("cuda-init", "torch.cuda", "CUDA was initialised")


def _cuda_initialized(torch: object) -> bool | None:
    is_initialized = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else None


class _FileEntry(NamedTuple):
    is_dir: bool
    size: int
    mtime_ns: int


class _FileProbe(_Probe):
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
        dirnames[:] = sorted(name for name in dirnames if name not in _SKIPPED_DIRS)
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


class _Tracer(NamedTuple):
    get: Callable[[], object]
    set: Callable[[Any], object]


_TRACERS = {
    "sys.settrace": _Tracer(sys.gettrace, sys.settrace),
    "sys.setprofile": _Tracer(sys.getprofile, sys.setprofile),
    **(
        {"threading.settrace": _Tracer(threading.gettrace, threading.settrace)}
        if hasattr(threading, "gettrace")
        else {}
    ),
    **(
        {"threading.setprofile": _Tracer(threading.getprofile, threading.setprofile)}
        if hasattr(threading, "getprofile")
        else {}
    ),
}
_HOOKS = ((sys, "excepthook"), (threading, "excepthook"), (sys, "unraisablehook"), (sys, "displayhook"))
_TIMERS = tuple(
    (f"signal.{name}", getattr(signal, name))
    for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, name)
)
_UNCATCHABLE = frozenset(getattr(signal, name) for name in ("SIGKILL", "SIGSTOP") if hasattr(signal, name))
# How far a timer's remaining time may be from what the elapsed clock predicts before it counts as re-armed.
_TIMER_SLACK_S = 0.05


class _ProcessHookProbe(_Probe):
    kinds = ("process-hook",)

    def __init__(self) -> None:
        self._registered: list[object] = []
        self._found: list[SideEffect] = []
        self._stack = ExitStack()

    def start(self) -> None:
        self._handlers = _signal_handlers()
        self._timers = {name: signal.getitimer(which) for name, which in _TIMERS}
        self._clocks = _clocks()
        self._gc_callbacks = list(gc.callbacks)
        self._hooks = _hooks()
        self._atexit_before = _atexit_count()
        registered = self._registered

        @functools.wraps(atexit.register)
        def register(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            result = original(function, *args, **kwargs)
            registered.append(function)
            return result

        original = _replace(self._stack, atexit, "register", register)
        self._tracing = {name: tracer.get() for name, tracer in _TRACERS.items()}

    def stop(self) -> None:
        self._put_back_tracers()
        self._stack.close()
        self._atexit_after = _atexit_count()
        self._check_timers()
        self._check_signals()
        self._gc_after = list(gc.callbacks)
        self._hooks_after = _hooks()

    def _put_back_tracers(self) -> None:
        for name, tracer in _TRACERS.items():
            old, new = self._tracing[name], tracer.get()
            if new is not old:
                tracer.set(old)
                self._found.append(SideEffect("process-hook", name, f"{_describe(old)} -> {_describe(new)}; put back"))

    def _check_timers(self) -> None:
        names = ("signal.ITIMER_REAL", "signal.ITIMER_VIRTUAL", "signal.ITIMER_PROF")
        elapsed = dict(zip(names, _elapsed(self._clocks), strict=True))
        for name, which in _TIMERS:
            (old_delay, old_interval), (new_delay, new_interval) = self._timers[name], signal.getitimer(which)
            if old_delay <= 0:
                if new_delay > 0:
                    signal.setitimer(which, 0)
                    detail = f"disarmed -> {_timer(new_delay, new_interval)}; disarmed again"
                    self._found.append(SideEffect("process-hook", name, detail))
                continue
            expected = old_delay - elapsed[name]
            if new_delay <= 0 and not old_interval and expected <= _TIMER_SLACK_S:
                continue  # it was due and went off
            changed = abs(new_interval - old_interval) > 1e-6 or new_delay <= 0
            if not old_interval:
                changed = changed or abs(new_delay - expected) > _TIMER_SLACK_S
            if changed:
                signal.setitimer(which, max(expected, 1e-3), old_interval)
                now = _timer(new_delay, new_interval) if new_delay > 0 else "disarmed"
                detail = f"{_timer(old_delay, old_interval)} -> {now}; re-armed to about where it was"
                self._found.append(SideEffect("process-hook", name, detail))

    def _check_signals(self) -> None:
        after = _signal_handlers()
        for signum, old in self._handlers.items():
            new = after.get(signum, old)
            if new is not old:
                detail = (
                    f"handler {_describe_handler(old)} -> {_describe_handler(new)}; {_put_back_handler(signum, old)}"
                )
                self._found.append(SideEffect("process-hook", _signal_name(signum), detail))

    def effects(self) -> Iterator[SideEffect]:
        yield from self._found
        for function in self._registered:
            yield SideEffect("process-hook", "atexit", f"callback registered: {_describe(function)}")
        before, after = self._atexit_before, self._atexit_after
        if before is not None and after is not None:
            other = after - before - len(self._registered)
            count = f"(atexit._ncallbacks() {before} -> {after})"
            if other > 0:
                yield SideEffect(
                    "process-hook", "atexit", f"{other} callback(s) registered below atexit.register {count}"
                )
            elif other < 0:
                yield SideEffect("process-hook", "atexit", f"{-other} callback(s) unregistered {count}")
        for callback in self._gc_after:
            if not _contains(self._gc_callbacks, callback):
                yield SideEffect("process-hook", "gc.callbacks", f"callback added: {_describe(callback)}")
        for callback in self._gc_callbacks:
            if not _contains(self._gc_after, callback):
                yield SideEffect("process-hook", "gc.callbacks", f"callback removed: {_describe(callback)}")
        for name, old in self._hooks.items():
            new = self._hooks_after[name]
            if new is not old:
                yield SideEffect("process-hook", name, f"{_describe(old)} -> {_describe(new)}")


def _signal_handlers() -> dict[int, object]:
    handlers = {}
    for signum in signal.valid_signals():
        if signum in _UNCATCHABLE:
            continue
        try:
            handlers[int(signum)] = signal.getsignal(signum)
        except (ValueError, OSError):
            continue
    return handlers


def _signal_name(signum: int) -> str:
    try:
        return f"signal.{signal.Signals(signum).name}"
    except ValueError:
        return f"signal.{signum}"


def _describe_handler(handler: object) -> str:
    if handler is None:
        return "<installed outside Python>"
    if isinstance(handler, signal.Handlers):
        return handler.name
    return _describe(handler)


def _put_back_handler(signum: int, handler: object) -> str:
    if handler is None:
        return "not put back: the old one was installed outside Python"
    try:
        signal.signal(signum, handler)  # type: ignore[arg-type]
    except (ValueError, OSError, TypeError) as error:
        return f"not put back ({error})"
    return "put back"


def _clocks() -> tuple[float, float, float]:
    """Wall-clock, user CPU and user+system CPU time: what ITIMER_REAL, ITIMER_VIRTUAL and ITIMER_PROF count down."""
    times = os.times()
    return time.monotonic(), times.user, times.user + times.system


def _elapsed(since: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(now - then for now, then in zip(_clocks(), since, strict=True))


def _timer(delay: float, interval: float) -> str:
    return f"fires in {delay:.6g} s" + (f", then every {interval:.6g} s" if interval else "")


def _hooks() -> dict[str, object]:
    return {f"{module.__name__}.{name}": getattr(module, name, None) for module, name in _HOOKS}


def _atexit_count() -> int | None:
    count = getattr(atexit, "_ncallbacks", None)
    return count() if callable(count) else None
