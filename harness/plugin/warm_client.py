"""Case commands run through warm servers: a warm run forked by a server of its target interpreter instead of
started fresh.

A warm run (:mod:`harness.plugin.warm_sessions`) first imports torch and Megatron: four to five seconds of CPU, paid
again by every run. The project's end-to-end tests make some seventy runs on a CI job, the sensitivity catalogue
hundreds, most on the same few targets. Each thread that runs them keeps a server (:mod:`harness.plugin.warm_server`)
per target interpreter and environment, which made those imports once and forks the run from them; the run is the
command's own (its arguments, environment and working directory), so what the caller reads back (the exit status, the
output, the reports) is what the command started fresh would have given. The environment is part of a server's key:
what an import does can depend on it. ``PYTEST_CURRENT_TEST``, which pytest changes for every test and no import
reads, is left out of the key, and still reaches the run. A server serves one request at a time, so each thread has
its own.

A thread keeps at most :data:`MOST_SERVERS` (its least recently used one goes); all are stopped when the process
exits, and each dies with it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness import REPO_ROOT
from harness.plugin.command import WARM_SESSIONS, run_fresh

MOST_SERVERS = 3
"""Servers one thread keeps: each holds torch and Megatron (some hundreds of MiB); a test module, or a catalogue's
share of one target, mostly runs on one or two interpreters and environments."""
START_TIMEOUT_S = 180.0
_UNKEYED = frozenset({"PYTEST_CURRENT_TEST"})
_runs = itertools.count(1)


class WarmServerError(RuntimeError):
    """A warm server that did not start, or went away during a run: the run's result is lost, never guessed."""


@dataclass
class _Server:
    process: subprocess.Popen[bytes]
    directory: Path

    @property
    def socket_path(self) -> Path:
        return self.directory / "socket"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


_servers: OrderedDict[tuple[int, str, tuple[tuple[str, str], ...]], _Server] = OrderedDict()
_servers_lock = threading.Lock()


def _start(python: str, env: Mapping[str, str]) -> _Server:
    """A server of ``python`` under ``env``, listening: its socket and log in a short directory of their own (a Unix
    socket's path has at most 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="mc-warm-"))
    command = [python, "-m", "harness.plugin.warm_server", str(directory / "socket")]
    with (directory / "server.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=log)
    server = _Server(process, directory)
    assert process.stdout is not None
    ready = _read_line(process.stdout.fileno(), START_TIMEOUT_S)
    process.stdout.close()
    if ready.strip() != b"ready":
        printed = server.log.read_text(errors="replace")[-3000:]
        server.stop()
        raise WarmServerError(f"the warm server of {python} did not start within {START_TIMEOUT_S:g} s: {printed}")
    return server


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from ``fd`` within ``timeout`` seconds (empty at end of file or on time out)."""
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            if not selector.select(timeout):
                return b""
            chunk = os.read(fd, 1)
            if not chunk:
                return line
            line += chunk
    return line


def _server(python: str, env: Mapping[str, str]) -> _Server:
    thread = threading.get_ident()
    key = (thread, python, tuple(sorted((k, v) for k, v in env.items() if k not in _UNKEYED)))
    stale = []
    with _servers_lock:
        server = _servers.pop(key, None)
        if server is not None and server.process.poll() is None:
            _servers[key] = server
            return server
        stale += [server] if server is not None else []
        own = [k for k in _servers if k[0] == thread]
        stale += [_servers.pop(k) for k in own[: max(0, len(own) - MOST_SERVERS + 1)]]
    for old in stale:
        old.stop()
    server = _start(python, env)
    with _servers_lock:
        _servers[key] = server
    return server


def _forget(server: _Server) -> None:
    with _servers_lock:
        for key in [key for key, known in _servers.items() if known is server]:
            del _servers[key]
    server.stop()


def run_warm(
    command: list[str], environment: Mapping[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``command`` as :func:`subprocess.run` would run it from the repository root (output captured, ``timeout``
    kills it and raises :class:`subprocess.TimeoutExpired`); a warm run is forked by its interpreter's server."""
    env = dict(environment) if environment is not None else dict(os.environ)
    if command[1:3] != ["-m", WARM_SESSIONS]:
        return run_fresh(command, env, timeout)
    server = _server(command[0], env)
    output = server.directory / f"run-{next(_runs)}.out"
    request = {"argv": command[3:], "env": env, "cwd": str(REPO_ROOT), "output": str(output)}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(server.socket_path))
            connection.sendall(json.dumps(request).encode() + b"\n")
            status = _wait(connection, command, output, timeout)
    except OSError as err:
        log = server.log.read_text(errors="replace")[-3000:] if server.log.exists() else ""
        _forget(server)  # never asked again, even while it is still dying
        raise WarmServerError(f"the warm server of {command[0]} went away ({err}); it printed: {log}") from err
    try:
        return subprocess.CompletedProcess(command, status, output.read_text(errors="replace"), "")
    finally:
        output.unlink(missing_ok=True)


def _wait(connection: socket.socket, command: list[str], output: Path, timeout: float) -> int:
    """The run's exit status; past ``timeout``, the run killed and :class:`subprocess.TimeoutExpired` raised."""
    lines = _lines(connection, timeout)
    pid = next(lines)["pid"]
    try:
        return next(lines)["status"]
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # its sessions and ranks die with it
        printed = output.read_text(errors="replace") if output.exists() else ""
        raise subprocess.TimeoutExpired(command, timeout, output=printed) from None


def _lines(connection: socket.socket, timeout: float) -> Iterator[dict[str, int]]:
    connection.settimeout(timeout)
    with connection.makefile("rb") as stream:
        while True:
            line = stream.readline()
            if not line:
                raise OSError("the server closed the connection before the run ended")
            yield json.loads(line)


@atexit.register
def _stop_all() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop()
