"""The probes of concurrency a call starts: threads (``thread``) and child processes (``process``), seen through the
Python entry points that start them and, for processes, in ``/proc``."""

from __future__ import annotations

import _thread
import functools
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect, describe, replace_attribute, shorten


class ThreadProbe(Probe):
    """Threads started by the call and still running after it."""

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

        original_start = replace_attribute(self._stack, threading.Thread, "start", start_thread)
        original_start_new_thread = replace_attribute(self._stack, _thread, "start_new_thread", start_new_thread)

    def stop(self) -> None:
        self._stack.close()
        self._alive = {id(thread) for thread in self._threads if thread.is_alive()}

    def effects(self) -> Iterator[SideEffect]:
        for thread in self._threads:
            state = "started, still running" if id(thread) in self._alive else "started, finished"
            daemon = " (daemon)" if thread.daemon else ""
            target = getattr(thread, "_target", None)
            runs = f", target {describe(target)}" if target is not None else ""
            yield SideEffect("thread", thread.name, f"{state}{daemon}{runs}")
        for function in self._raw:
            yield SideEffect("thread", "_thread.start_new_thread", f"started {describe(function)}")


class _Spawn(NamedTuple):
    via: str
    program: str
    command: str
    pid: int | None
    outcome: str


class ProcessProbe(Probe):
    """Child processes the call started (``os`` entry points such as ``fork`` and ``system``, and processes found as
    children afterwards): a rank that forks at import doubles what runs beside training."""

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

        original_init = replace_attribute(self._stack, subprocess.Popen, "__init__", popen_init)
        for name in self._OS_ENTRY_POINTS:
            replace_attribute(self._stack, os, name, self._os_wrapper(name, getattr(os, name)))

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
            yield SideEffect("process", spawn.program, shorten(detail))
        for pid, command in self._children_after.items():
            if pid not in self._children_before and pid not in known:
                program = Path(command.partition(" ")[0]).name or str(pid)
                yield SideEffect("process", program, shorten(f"child process {pid} appeared: {command}"))


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
