"""The fork server that ranks start from, and the tie that makes every forked process die with its parent.

Ranks fork from a server that has imported torch and Megatron once (multiprocessing's ``forkserver``). The server is
either started fresh (:func:`start_fork_server`), forked from a process that has done those imports already
(:func:`fork_fork_server`, the warm run), or inherited by a process forked from one whose server runs
(:func:`inherit_fork_server`). The rank pool (:mod:`harness.ranks.pool`) only asks :func:`rank_context` for it.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import socket
import sys
import tempfile
import traceback

FORKSERVER_PRELOAD = ("harness.ranks.preload",)
"""What the fork server imports before it forks a rank: torch, Megatron and the harness's rank modules (see
:mod:`harness.ranks.preload`)."""

_UNIX_SOCKET_PATH_MAX = 107
_PR_SET_PDEATHSIG = 1


def rank_context() -> multiprocessing.context.BaseContext:
    """Ranks fork from a fork server that has imported torch and Megatron once, where available.

    Spawning makes every rank import both itself: about 3 s of CPU each, so a four-rank pool took 6-7 s to start on
    2 cores. The server is a fresh interpreter (no threads, no CUDA), started on first use or by
    :func:`start_fork_server`; it exits when this process does, and ranks die with it (see ``die_with_parent``).
    ``spawn`` is kept where there is no fork.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods() or not _forkserver_socket_fits():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx


def start_fork_server() -> bool:
    """Start the fork server now, without waiting for it: its imports (seconds of CPU) then run beside whatever this
    process does next, instead of inside the first case that needs ranks. False where ranks are spawned instead.

    Call it from the thread that will start the pools (the main thread under pytest), as for any pool.
    """
    if rank_context().get_start_method() != "forkserver":
        return False
    multiprocessing.forkserver._forkserver.ensure_running()  # the instance's: inherit_fork_server may replace it
    return True


def fork_fork_server() -> bool:
    """Start the fork server as a fork of this process, which has imported torch and Megatron: its ranks then
    inherit those imports (and anything else this process changed before, such as a Megatron mutant's modules)
    without the seconds of CPU a fresh server spends importing them again. A server this process had is replaced.
    False where ranks are spawned instead.

    Fork it while this process runs one thread (before pytest starts any): the server takes only the calling thread
    along. It serves requests as multiprocessing's own server does, and leaves when this process (the last holder of
    its "alive" pipe) is gone.
    """
    if rank_context().get_start_method() != "forkserver":
        return False
    server = multiprocessing.forkserver._forkserver
    server.__dict__.pop("ensure_running", None)  # what inherit_fork_server installed: this process is the parent now
    with server._lock:
        multiprocessing.resource_tracker.ensure_running()
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        listener = socket.socket(socket.AF_UNIX)
        address = multiprocessing.connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                os.close(alive_w)
                multiprocessing.forkserver.main(listener.fileno(), alive_r, list(FORKSERVER_PRELOAD))
            except SystemExit as done:
                status = done.code if isinstance(done.code, int) else 0
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                os._exit(status)
        listener.close()
        os.close(alive_r)
        server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    return True


def inherit_fork_server() -> None:
    """In a process forked from one whose fork server runs (:mod:`harness.plugin.warm_sessions`): fork ranks from
    that server, whose imports are done, rather than start another.

    multiprocessing's client asks ``waitpid`` whether its server lives, which only the server's parent may; in a
    forked child it would raise. Here the check asks the kernel instead, and a server gone is replaced by a new one
    as multiprocessing would.
    """
    server = multiprocessing.forkserver._forkserver
    pid = server._forkserver_pid
    if pid is None:
        return
    start = type(server).ensure_running

    def ensure_running() -> None:
        if server._forkserver_pid == pid and alive(pid):
            multiprocessing.resource_tracker.ensure_running()
            return
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        start(server)

    server.ensure_running = ensure_running


def _forkserver_socket_fits() -> bool:
    """Whether the fork server's Unix socket, which multiprocessing makes under TMPDIR
    (``<tmp>/pymp-XXXXXXXX/listener-XXXXXXXX``), fits the 107 bytes a socket path may have on Linux."""
    return len(tempfile.gettempdir()) + len("/pymp-XXXXXXXX/listener-XXXXXXXX") <= _UNIX_SOCKET_PATH_MAX


def die_with_parent(pool_pid: int) -> None:
    """Have Linux SIGKILL this process (a rank, a warm run's session) when its parent dies, so an aborted session
    leaves nothing behind.

    The parent is the pool's process under ``spawn`` and the fork server under ``forkserver``; the server exits as
    soon as the pool's process is gone, so either way a dead session takes its ranks along.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or not alive(pool_pid):
        # The parent died before prctl took effect; nobody will ever send a task.
        os._exit(1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
