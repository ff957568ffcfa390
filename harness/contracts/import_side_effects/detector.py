"""Detecting what a call -- typically an isolated import of an adapter package -- changed in the process.

An adapter package that patches Megatron, configures logging, reads or writes the environment, starts threads or
installs process-wide hooks as a mere consequence of being imported changes training for everyone who imports it.
The detector snapshots the process before and after the call, instruments the few entry points where a change leaves
no trace in a snapshot, and reports every difference as a :class:`SideEffect` naming its kind, what changed and how.
This module holds the detector, its allowances and the formatting of what it reports; the probes that do the
observing live in :mod:`harness.contracts.import_side_effects.probes`, one module per family.

Watched modules: the loaded modules under
:data:`~harness.contracts.import_side_effects.probes.modules.WATCHED_BY_DEFAULT` and under the caller's
``watch_modules`` when the detector starts, plus every fake module of an isolated load (see
:mod:`harness.contracts.import_side_effects.isolation`) that runs during the call. Watched classes: every class bound in
a watched module (also one defined elsewhere, such as a ``torch._C`` type bound in ``torch.distributed``), plus
``torch.Tensor`` when torch is imported. A class or function bound under several names is reported under the binding
that matches its own ``__module__`` and ``__qualname__`` when there is one, else under the first one found.

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
    into :data:`~harness.contracts.import_side_effects.probes.files.SKIPPED_DIRS`.
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

from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import ExitStack
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect
from harness.contracts.import_side_effects.probes.callables import ClassProbe, FunctionStateProbe
from harness.contracts.import_side_effects.probes.cuda import CudaProbe
from harness.contracts.import_side_effects.probes.environment import EnvironProbe
from harness.contracts.import_side_effects.probes.files import FileProbe, SysPathProbe
from harness.contracts.import_side_effects.probes.hooks import ProcessHookProbe
from harness.contracts.import_side_effects.probes.logs import LoggingProbe, WarningProbe
from harness.contracts.import_side_effects.probes.modules import ModuleProbe
from harness.contracts.import_side_effects.probes.mutable_globals import MutableGlobalProbe
from harness.contracts.import_side_effects.probes.processes import ProcessProbe, ThreadProbe
from harness.formats.effect_kinds import ALLOWANCE_KINDS, KINDS, MESSAGE_ALLOWANCES

_ALLOW_EXAMPLE = "{'env-read': ['SLIME_*'], 'class-attribute': ['deep_ep.Buffer.__init__']}"

Allowances = Mapping[str, Collection[str]]
"""Per-name allowances: kind -> ``fnmatch`` patterns matched against :attr:`SideEffect.name`."""


def format_effects(effects: Iterable[SideEffect]) -> str:
    """One ``kind name: detail`` line per effect, for a failure message."""
    return "\n".join(str(effect) for effect in effects) or "no side effects"


def detect(fn: Callable[[], object], **options: Any) -> list[SideEffect]:
    """Call ``fn`` and return what it changed that no allowance waives; ``options`` are those of
    :class:`SideEffectDetector` (``allow``, ``watch_modules``, ``allowed_imports``, ``own_prefix``, ``file_root``).
    An exception from ``fn`` propagates."""
    return detect_with_allowances(fn, **options)[0]


def detect_with_allowances(fn: Callable[[], object], **options: Any) -> tuple[list[SideEffect], list[SideEffect]]:
    """Call ``fn`` and return what it changed as ``(effects, allowed)``: the effects no allowance matches, and those
    one does (the waivers used); ``options`` as for :func:`detect`. An exception from ``fn`` propagates."""
    with SideEffectDetector(**options) as detector:
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
        self._probes: list[Probe] = [
            FileProbe(Path(file_root) if file_root is not None else None),
            ModuleProbe(watch, tuple(allowed_imports), own_prefix),
            FunctionStateProbe(watch),
            ClassProbe(watch),
            MutableGlobalProbe(watch),
            SysPathProbe(),
            CudaProbe(),
            ProcessProbe(),
            ThreadProbe(),
            LoggingProbe(),
            WarningProbe(),
            EnvironProbe(),
            ProcessHookProbe(),
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
