"""Detecting what a call -- typically an isolated import of an adapter package -- changed in the process.

An adapter package that patches Megatron, configures logging, reads or writes the environment or starts threads as
a mere consequence of being imported changes training for everyone who imports it. The detector snapshots the
process before and after the call, instruments the few entry points where a change leaves no trace in a snapshot,
and reports every difference as a :class:`SideEffect` naming its kind, what changed and how.

Kinds (:data:`KINDS`):

``module-attribute``
    An attribute added, deleted or re-bound (compared by identity) on a watched module, or on a class defined in
    one. Watched: loaded modules under :data:`_WATCHED_BY_DEFAULT` and under the caller's ``watch_modules``, plus
    every fake module of an isolated load (see :mod:`harness.contracts.imports.isolation`) that runs during the call.
``sys-modules``
    A module imported for the first time, removed or replaced, other than the package's own (``own_prefix``, and
    the root of each isolated load), the caller's ``allowed_imports`` and the standard library. Modules an isolated
    load imported are reported although the isolation removed them again.
``sys-path``
    ``sys.path``, ``sys.meta_path`` or ``sys.path_hooks`` changed.
``log-record``
    A record handled by any logger -- seen through :meth:`logging.Logger.handle`, so loggers that do not propagate
    count too. Records below a logger's level are never created and are not seen.
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
    they may be secrets.
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

What cannot be seen: environment access below ``os.environ`` (``os.putenv``, ``posix.environ``, C code) and reads
through a reference to the real ``os.environ`` taken before the call; threads and processes started by native code
that exit before the call ends; files written outside the watched directory; patches to modules that are not
watched. The instrumentation is process-wide and not thread-safe. A module that binds ``os.environ`` during the call
(``from os import environ``) keeps the instrumented mapping, which shares its data with the real one.
"""

from __future__ import annotations

import _thread
import functools
import logging
import os
import reprlib
import subprocess
import sys
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType, TracebackType
from typing import Any, NamedTuple

from harness.contracts.imports.isolation import Isolation, observe_isolations

KINDS = (
    "module-attribute",
    "sys-modules",
    "sys-path",
    "log-record",
    "logger-config",
    "warning",
    "env-read",
    "env-write",
    "thread",
    "process",
    "cuda-init",
    "file",
)
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
# Written by the interpreter itself on first use (warning registries, lazily created annotations, protocol caches).
_IGNORED_ATTRIBUTES = frozenset(
    {"__warningregistry__", "__annotations__", "__protocol_attrs__", "__non_callable_proto_members__"}
)
_MISSING = object()
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_MAX_DETAIL = 200


@dataclass(frozen=True)
class SideEffect:
    """One change a call made: its kind (one of :data:`KINDS`), what changed, and how."""

    kind: str
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}"


def format_effects(effects: Iterable[SideEffect]) -> str:
    """One ``kind name: detail`` line per effect, for a failure message."""
    return "\n".join(str(effect) for effect in effects) or "no side effects"


def detect(
    fn: Callable[[], object],
    *,
    allow: Collection[str] = (),
    watch_modules: Collection[str] = (),
    allowed_imports: Collection[str] = (),
    own_prefix: str | None = None,
    file_root: str | Path | None = None,
) -> list[SideEffect]:
    """Call ``fn`` and return what it changed; an exception from ``fn`` propagates (see :class:`SideEffectDetector`)."""
    with SideEffectDetector(
        allow=allow,
        watch_modules=watch_modules,
        allowed_imports=allowed_imports,
        own_prefix=own_prefix,
        file_root=file_root,
    ) as detector:
        fn()
    return detector.effects


class SideEffectDetector:
    """Context manager whose ``effects`` list, filled on exit, holds what the block changed, in :data:`KINDS` order.

    ``allow`` names kinds a downstream declared acceptable: they are neither instrumented nor reported.
    ``watch_modules`` and ``allowed_imports`` are module names, each covering its submodules too; ``own_prefix``
    names the package whose own modules are not reported as imports; ``file_root`` is the directory watched for
    files (the working directory on entry by default). A detector is used once; on exit it puts back everything it
    instrumented, also when the block raises, and lets the exception propagate.
    """

    def __init__(
        self,
        *,
        allow: Collection[str] = (),
        watch_modules: Collection[str] = (),
        allowed_imports: Collection[str] = (),
        own_prefix: str | None = None,
        file_root: str | Path | None = None,
    ) -> None:
        unknown = set(allow) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown side-effect kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        self.allow = frozenset(allow)
        self.effects: list[SideEffect] = []
        probes: list[_Probe] = [
            _FileProbe(Path(file_root) if file_root is not None else None),
            _ModuleProbe(tuple(watch_modules), tuple(allowed_imports), own_prefix),
            _SysPathProbe(),
            _CudaProbe(),
            _ProcessProbe(),
            _ThreadProbe(),
            _LoggingProbe(record_records="log-record" not in self.allow),
            _WarningProbe(),
            _EnvironProbe(record_reads="env-read" not in self.allow),
        ]
        self._probes = [probe for probe in probes if not set(probe.kinds) <= self.allow]
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
        effects = [effect for probe in self._probes for effect in probe.effects() if effect.kind not in self.allow]
        self.effects = sorted(effects, key=lambda effect: KINDS.index(effect.kind))


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
        return f"<{kind} {module}.{qualname}>" if module else f"<{kind} {qualname}>"
    if issubclass(kind_of, ModuleType):
        return f"<module {getattr(value, '__name__', '?')}>"
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL else f"{text[: _MAX_DETAIL - 3]}..."


class _Namespace(NamedTuple):
    name: str
    owner: object
    before: dict[str, object]


class _ModuleProbe(_Probe):
    kinds = ("module-attribute", "sys-modules")

    def __init__(self, watch: tuple[str, ...], allowed_imports: tuple[str, ...], own_prefix: str | None) -> None:
        self._watched = (*_WATCHED_BY_DEFAULT, *watch)
        self._expected = (*allowed_imports, *((own_prefix,) if own_prefix else ()))
        self._namespaces: dict[int, _Namespace] = {}
        self._isolations: list[Isolation] = []
        self._stack = ExitStack()

    def start(self) -> None:
        self._before = dict(sys.modules)
        for name, module in self._before.items():
            if _under(name, self._watched):
                self._watch(name, module)
        self._stack.enter_context(observe_isolations(self._isolation_started, self._isolations.append))

    def _isolation_started(self, isolation: Isolation) -> None:
        for name, module in isolation.fakes.items():
            self._watch(name, module)

    def _watch(self, name: str, module: object) -> None:
        namespace = getattr(module, "__dict__", None)
        if id(module) in self._namespaces or not isinstance(namespace, dict):
            return
        self._namespaces[id(module)] = _Namespace(name, module, dict(namespace))
        for attribute, value in namespace.items():
            if (
                issubclass(type(value), type)
                and vars(value).get("__module__") == name
                and id(value) not in self._namespaces
            ):
                self._namespaces[id(value)] = _Namespace(f"{name}.{attribute}", value, dict(vars(value)))

    def stop(self) -> None:
        self._stack.close()
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


def _namespace_changes(prefix: str, before: dict[str, object], after: dict[str, object]) -> Iterator[SideEffect]:
    for attribute in [*before, *(name for name in after if name not in before)]:
        old, new = before.get(attribute, _MISSING), after.get(attribute, _MISSING)
        if old is new or attribute in _IGNORED_ATTRIBUTES:
            continue
        name = f"{prefix}.{attribute}"
        if old is _MISSING:
            if issubclass(type(new), ModuleType) and getattr(new, "__name__", None) == name:
                continue  # the import system binding a newly imported submodule: reported as sys-modules
            yield SideEffect("module-attribute", name, f"added: {_describe(new)}")
        elif new is _MISSING:
            yield SideEffect("module-attribute", name, f"deleted: {_describe(old)}")
        else:
            yield SideEffect("module-attribute", name, f"re-bound: {_describe(old)} -> {_describe(new)}")


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

    def __init__(self, *, record_records: bool) -> None:
        self._record_records = record_records
        self._records: list[logging.LogRecord] = []
        self._stack = ExitStack()

    def start(self) -> None:
        self._before = _LoggingState.take()
        if self._record_records:
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
            yield SideEffect("log-record", record.name, _shorten(f"{record.levelname}: {message}"))
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


class _RecordingEnviron(os._Environ):  # type: ignore[type-arg]
    """An ``os.environ`` over the same data as the real one that notes which variables are read."""

    def __init__(self, real: Any, reads: dict[str, bool]) -> None:
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
        self._reads.setdefault(os.fsdecode(key) if isinstance(key, bytes) else str(key), present)


class _EnvironProbe(_Probe):
    kinds = ("env-read", "env-write")
    _MAPPINGS = tuple(name for name in ("environ", "environb") if hasattr(os, name))

    def __init__(self, *, record_reads: bool) -> None:
        self._record_reads = record_reads
        self._reads: dict[str, bool] = {}
        self._replaced: dict[str, object] = {}
        self._stack = ExitStack()

    def start(self) -> None:
        self._real = os.environ
        self._before = dict(self._real)
        self._installed: dict[str, object] = {}
        for name in self._MAPPINGS:
            original = getattr(os, name)
            self._stack.callback(setattr, os, name, original)
            if self._record_reads:
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
        for name, present in self._reads.items():
            if name == "*":
                yield SideEffect("env-read", name, "the whole environment was enumerated")
            else:
                yield SideEffect("env-read", name, "read (set)" if present else "read (unset)")
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
