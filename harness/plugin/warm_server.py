"""A target interpreter that imported torch and Megatron once and forks a warm run for every request it is sent.

Each warm run (:mod:`harness.plugin.warm_sessions`) pays torch's and Megatron's imports, four to five seconds of CPU,
before its first case. The project's end-to-end tests start one for every run they make, some seventy on a CI job,
most on the same few targets. A server per target interpreter and test worker pays them once: for every request it
forks a child from its imported state, and the child is the warm run the command would have started, arguments,
environment, working directory and all, with its output in the file the request names. Everything after the imports
(the fork server, the sessions and their ranks) is the child's own, as in a warm run started fresh.

What was imported depends on the environment it was imported under, so a server serves only requests made under the
environment it was started with (the client keys its servers on it), and its children are killed with it.

Protocol, one request per connection, lines of JSON over a Unix socket: the client sends ``{"argv", "env", "cwd",
"output"}`` (``argv`` the warm run's arguments after ``-m harness.plugin.warm_sessions``); the server answers
``{"pid"}`` once the child is forked, then ``{"status"}`` when it has ended (its exit status, ``-N`` for a signal, as
:mod:`subprocess` has it). Run as ``python -m harness.plugin.warm_server SOCKET``: it writes its imports' warnings
beside the socket, and prints ``ready`` once it listens.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from harness.plugin import warm_sessions
from harness.plugin.command import BROKEN_STATUS
from harness.ranks.fork_server import die_with_parent

READY = "ready"


def _serve_child(request: dict[str, Any], server_pid: int, server_fds: tuple[int, ...]) -> None:
    """In the forked child: the server's sockets closed (no process of the run may hold the listening one past the
    server), the request's environment, directory and output, then the warm run; never returns."""
    status = BROKEN_STATUS
    try:
        die_with_parent(server_pid)
        for fd in server_fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        sys.argv = [warm_sessions.__file__, *request["argv"]]
        status = warm_sessions.main(request["argv"])
    except SystemExit as ended:
        status = ended.code if isinstance(ended.code, int) else BROKEN_STATUS
    except BaseException:
        traceback.print_exc()
    finally:
        warm_sessions.leave(status)


def _answer(connection: socket.socket, listener: socket.socket) -> None:
    """One request: fork its warm run, say its pid, wait for it and say how it ended."""
    with connection, connection.makefile("rwb") as stream:
        line = stream.readline()
        if not line:
            return
        request = json.loads(line)
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            _serve_child(request, server_pid, (listener.fileno(), connection.fileno()))
        stream.write(json.dumps({"pid": pid}).encode() + b"\n")
        stream.flush()
        _, wait_status = os.waitpid(pid, 0)
        stream.write(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}).encode() + b"\n")
        with contextlib.suppress(OSError):
            stream.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.plugin.warm_server SOCKET", file=sys.stderr)
        return 2
    path = Path(argv[0])
    die_with_parent(os.getppid())
    warm_sessions.import_for_server(path.parent)
    gc.freeze()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        print(READY, flush=True)
        while True:
            connection, _ = listener.accept()
            try:
                _answer(connection, listener)
            except (OSError, ValueError):
                traceback.print_exc()  # a client that went away, or a garbled request; the next one is served


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
