"""The probe of process-wide hooks (``process-hook``): ``atexit`` registrations, signal handlers, interval timers,
``gc.callbacks``, trace and profile functions, and the exception and display hooks. It puts back what would derail
the rest of a test run (trace and profile functions, timers, signal handlers) and reports the rest as it is."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect, contains, describe, replace_attribute


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


class ProcessHookProbe(Probe):
    """Process-wide hooks installed: atexit functions, signal handlers, interval timers, trace and profile functions,
    ``sys.excepthook`` and gc callbacks; each runs in every rank, far from the code that set it."""

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

        original = replace_attribute(self._stack, atexit, "register", register)
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
                self._found.append(SideEffect("process-hook", name, f"{describe(old)} -> {describe(new)}; put back"))

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
            yield SideEffect("process-hook", "atexit", f"callback registered: {describe(function)}")
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
            if not contains(self._gc_callbacks, callback):
                yield SideEffect("process-hook", "gc.callbacks", f"callback added: {describe(callback)}")
        for callback in self._gc_callbacks:
            if not contains(self._gc_after, callback):
                yield SideEffect("process-hook", "gc.callbacks", f"callback removed: {describe(callback)}")
        for name, old in self._hooks.items():
            new = self._hooks_after[name]
            if new is not old:
                yield SideEffect("process-hook", name, f"{describe(old)} -> {describe(new)}")


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
    return describe(handler)


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
