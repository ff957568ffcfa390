"""Long-lived rank processes that run many distributed tasks, so a case does not pay the torch import per run.

Every case that needs ``torch.distributed`` would otherwise spawn ``world_size`` interpreters, import torch (and
often Megatron) and rendezvous: seconds per case. A pool pays that once per world size and xdist worker, then sends
each task to the same processes over pipes.

Rendezvous goes through a ``FileStore`` in a private temp dir, not a TCP store on a chosen port, so parallel xdist
workers cannot collide (gloo's own connections use ephemeral ports). A failing task never leaves the pool half-alive:
an exception, a hang or a dead rank is reported with what each rank was doing, the processes are torn down, and the
next ``run`` starts fresh ones (``generation`` counts the starts). No rank outlives the session: ``close`` runs at
exit, and ranks get SIGKILL when their parent dies.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ranks.fork_server import FORKSERVER_PRELOAD, die_with_parent, rank_context
from harness.ranks.placement import PLACEMENTS, enter_rank

_DEFAULT_TIMEOUT_S = 120.0
TIMEOUT_ENV_VAR = "MEGATRON_CONFORMANCE_RANK_TIMEOUT_S"
# After the first rank fails, how long to keep listening for the others: ranks that raise together are all reported,
# while a peer stuck in a collective with the failed rank only costs this much.
_FAILURE_GRACE_S = 0.5
# Starting ranks imports torch (and whatever the tasks' modules import) in every rank at once: seconds when idle, far
# more on a loaded CI machine. A rank that never joins the process group still fails the start.
START_TIMEOUT_S = 300.0
# How long ``close`` lets ranks leave their process group on their own before terminating them.
_CLOSE_GRACE_S = 5.0
# How long a terminated rank gets before SIGKILL.
_KILL_GRACE_S = 2.0
# How long a timed-out rank gets to dump its stack into the timeout message.
_STACK_DUMP_WAIT_S = 2.0
_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)

_TASK_HINT = (
    "A rank that skips a collective its peers enter (or enters one they skip) leaves them blocked. If the task is "
    f"merely slow, pass timeout_s= or set {TIMEOUT_ENV_VAR}."
)
_START_HINT = (
    "The waiting ranks did not get through importing torch, joining the process group and rank_setup; their stacks "
    "below show where they are."
)

_OK = "ok"
_RAISED = "raised"
_RUN = "run"
_STOP = "stop"


class RankPoolError(AssertionError):
    """A distributed task failed; an ``AssertionError`` so that pytest reports the case as failed, not errored."""


class RankRaised(RankPoolError):
    """One or more ranks raised; ``failures`` maps each rank that reported to its exception and traceback."""

    def __init__(self, message: str, failures: dict[int, RankFailure] | None = None) -> None:
        super().__init__(message)
        self.failures = failures or {}


class RankTimeout(RankPoolError):
    """Some ranks did not finish in time, typically stuck in a collective that a peer never entered."""

    def __init__(self, message: str, waiting: list[int] | None = None, finished: list[int] | None = None) -> None:
        super().__init__(message)
        self.waiting = waiting or []
        self.finished = finished or []


class RankDied(RankPoolError):
    """A rank process ended in the middle of a task; ``deaths`` maps each such rank to its signal or exit code."""

    def __init__(self, message: str, deaths: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.deaths = deaths or {}


@dataclass(frozen=True)
class RankFailure:
    """An exception raised in a rank, as text: exception objects need not survive pickling, their text does."""

    type_name: str
    message: str
    traceback: str

    def headline(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


def default_timeout_s() -> float:
    """The per-task timeout when neither the call nor the pool sets one: ``$MEGATRON_CONFORMANCE_RANK_TIMEOUT_S``."""
    raw = os.environ.get(TIMEOUT_ENV_VAR)
    if raw is None or not raw.strip():
        return _DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV_VAR}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{TIMEOUT_ENV_VAR}={raw!r} must be positive")
    return value


class RankPool:
    """``world_size`` rank processes in one process group, running one task at a time on all ranks.

    ``rank_setup(rank, world_size)``, a picklable module-level function, runs once in each rank after the process
    group is up, e.g. to apply a CPU workaround every task relies on. The ranks start on the first ``run`` or on
    ``start``. Each rank runs torch with one intra-op thread unless ``OMP_NUM_THREADS`` is set. Linux delivers the
    parent-death signal when the *thread* that started the ranks exits, so start a pool from a thread that lives as
    long as the pool (the main thread, under pytest).
    """

    def __init__(
        self,
        world_size: int,
        placement: str = "gloo",
        timeout_s: float | None = None,
        rank_setup: Callable[[int, int], None] | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.world_size = world_size
        self.placement = placement
        self.timeout_s = timeout_s
        self.rank_setup = rank_setup
        self.state_tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        """Tasks that set up state later tasks rely on (a case's model-parallel groups): run again, in order, on the
        fresh ranks after a failure restarted the pool, so the task after a failed one meets the same state rather
        than a second, unrelated error."""
        self.generation = 0
        self.tasks_sent = 0
        """Tasks sent to the ranks since the pool was made, across restarts: a pool whose count has not moved ran no
        code in its ranks since the last look."""
        self._lock = threading.RLock()
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[multiprocessing.connection.Connection] = []
        self._tmpdir: Path | None = None
        _live_pools.add(self)

    def __repr__(self) -> str:
        state = f"running pids={self.pids}" if self._processes else "stopped"
        return f"RankPool(world_size={self.world_size}, placement={self.placement!r}, gen={self.generation}, {state})"

    @property
    def pids(self) -> list[int]:
        """Process ids of the ranks, in rank order; empty while the pool is stopped."""
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def running(self) -> bool:
        return bool(self._processes)

    @property
    def rendezvous_dir(self) -> Path | None:
        """The private dir of the running ranks: their ``FileStore`` and stack dumps; removed when they stop."""
        return self._tmpdir

    def start(self) -> None:
        """Spawn the ranks and wait until each has joined the process group; a no-op while they are running."""
        with self._lock:
            if self._processes:
                return
            self.generation += 1
            self._tmpdir = Path(tempfile.mkdtemp(prefix=f"rank-pool-w{self.world_size}-"))
            ctx = rank_context()
            try:
                for rank in range(self.world_size):
                    parent_conn, child_conn = ctx.Pipe(duplex=True)
                    process = ctx.Process(
                        target=_rank_main,
                        args=(
                            rank,
                            self.world_size,
                            self.placement,
                            str(self._tmpdir),
                            child_conn,
                            os.getpid(),
                            self.rank_setup,
                            tuple(RANK_START_HOOKS),
                        ),
                        name=f"rank-pool-w{self.world_size}-gen{self.generation}-rank{rank}",
                    )
                    process.start()
                    # Only the rank may hold its end, so that the parent sees EOF the moment the rank dies.
                    child_conn.close()
                    self._processes.append(process)
                    self._conns.append(parent_conn)
                start_timeout = max(START_TIMEOUT_S, self._resolve_timeout(None))
                self._collect(f"pool start (placement {self.placement})", start_timeout, _START_HINT)
            except BaseException:
                self._teardown()
                raise

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> list[Any]:
        """Call ``fn(rank, world_size, *args, **kwargs)`` on every rank and return the results in rank order.

        ``fn`` must be a module-level function; arguments and results are pickled by value, tensors included, so a
        result never aliases rank memory. Any failure raises a ``RankPoolError`` subclass and tears the pool down; the
        next call starts fresh ranks.
        """
        with self._lock:
            try:
                payload = pickle.dumps((_RUN, fn, args, kwargs))
            except Exception as exc:
                raise TypeError(
                    f"cannot send {_describe_fn(fn)} to the ranks: {type(exc).__name__}: {exc}; tasks must be "
                    "module-level functions with picklable arguments"
                ) from exc
            timeout = self._resolve_timeout(timeout_s)
            if not self._processes:
                self.start()
                for state_fn, state_args in self.state_tasks:
                    self._send(pickle.dumps((_RUN, state_fn, state_args, {})), state_fn, timeout)
            return self._send(payload, fn, timeout)

    def _send(self, payload: bytes, fn: Callable[..., Any], timeout: float) -> list[Any]:
        self.tasks_sent += 1
        try:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    # A rank that died since the last task is reported as dead by _collect.
                    conn.send_bytes(payload)
            return self._collect(f"task {_describe_fn(fn)}", timeout, _TASK_HINT)
        except BaseException:
            self._teardown()
            raise

    def close(self) -> None:
        """Stop the ranks: ask them to leave the process group, then terminate any that do not exit in time."""
        with self._lock:
            stop = pickle.dumps((_STOP,))
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.send_bytes(stop)
            deadline = time.monotonic() + _CLOSE_GRACE_S
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
            self._teardown()

    def _resolve_timeout(self, timeout_s: float | None) -> float:
        if timeout_s is not None:
            if timeout_s <= 0:
                raise ValueError(f"timeout_s must be positive, got {timeout_s}")
            return timeout_s
        return self.timeout_s if self.timeout_s is not None else default_timeout_s()

    def _collect(self, what: str, timeout_s: float, timeout_hint: str) -> list[Any]:
        """Wait for one reply per rank; raise for the first failure, after giving the other ranks a short grace."""
        started = time.monotonic()
        deadline = started + timeout_s
        pending = set(range(self.world_size))
        results: dict[int, Any] = {}
        failures: dict[int, RankFailure] = {}
        deaths: dict[int, str] = {}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            waitables: dict[Any, int] = {}
            for rank in pending:
                waitables[self._conns[rank]] = rank
                waitables[self._processes[rank].sentinel] = rank
            for ready in multiprocessing.connection.wait(list(waitables), timeout=remaining):
                rank = waitables[ready]
                if rank not in pending:
                    continue
                pending.discard(rank)
                reply = self._receive(rank)
                if reply is None:
                    deaths[rank] = self._death_of(rank)
                elif reply[0] == _OK:
                    results[rank] = reply[1]
                else:
                    failures[rank] = reply[1]
            if (failures or deaths) and pending:
                deadline = min(deadline, time.monotonic() + _FAILURE_GRACE_S)
        elapsed = time.monotonic() - started
        if deaths:
            raise RankDied(self._died_message(what, deaths, failures, pending), deaths)
        if failures:
            raise RankRaised(self._raised_message(what, failures, pending), failures)
        if pending:
            waiting = sorted(pending)
            finished = sorted(results)
            message = self._timeout_message(what, timeout_s, elapsed, waiting, finished, timeout_hint)
            raise RankTimeout(message, waiting, finished)
        return [results[rank] for rank in range(self.world_size)]

    def _receive(self, rank: int) -> tuple[str, Any] | None:
        """The rank's reply, or None when it is gone: EOF on its pipe, or its sentinel fired with nothing to read."""
        conn = self._conns[rank]
        try:
            if not conn.poll():
                return None
            return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return None
        except Exception as exc:
            return _RAISED, RankFailure(
                "ResultNotLoadable",
                f"the rank's reply could not be unpickled in the parent: {type(exc).__name__}: {exc}",
                "".join(traceback.format_exception(exc)),
            )

    def _death_of(self, rank: int) -> str:
        process = self._processes[rank]
        process.join(_KILL_GRACE_S)
        code = process.exitcode
        if code is None:
            return "closed its pipe but is still running"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def _header(self, what: str) -> str:
        return f"{what} on {_plural(self.world_size, 'rank')} (pids {self.pids}, pool generation {self.generation})"

    def _died_message(
        self, what: str, deaths: dict[int, str], failures: dict[int, RankFailure], pending: set[int]
    ) -> str:
        lines = [f"{self._header(what)}: a rank process ended"]
        lines += [f"  rank {rank} (pid {self._processes[rank].pid}) {deaths[rank]}" for rank in sorted(deaths)]
        lines += [f"  rank {rank} raised {failures[rank].headline()}" for rank in sorted(failures)]
        if pending:
            lines.append(f"  ranks still running when the pool was torn down: {_ranks(pending)}")
        lines.append(
            "Whatever a dead rank printed before it ended is on this process's stderr. "
            "The pool is torn down and restarts on the next run."
        )
        for rank in sorted(failures):
            lines += [f"--- traceback from rank {rank} ---", failures[rank].traceback.rstrip()]
        return "\n".join(lines)

    def _raised_message(self, what: str, failures: dict[int, RankFailure], pending: set[int]) -> str:
        lines = [f"{self._header(what)}: {_plural(len(failures), 'rank')} raised"]
        lines += [f"  rank {rank} raised {failures[rank].headline()}" for rank in sorted(failures)]
        if pending:
            lines.append(
                f"  ranks still running (likely waiting in a collective for the failed rank): {_ranks(pending)}"
            )
        lines.append("The pool is torn down and restarts on the next run.")
        for rank in sorted(failures):
            lines += [f"--- traceback from rank {rank} ---", failures[rank].traceback.rstrip()]
        return "\n".join(lines)

    def _timeout_message(
        self, what: str, timeout_s: float, elapsed: float, waiting: list[int], finished: list[int], timeout_hint: str
    ) -> str:
        lines = [
            f"{self._header(what)}: timed out after {elapsed:.1f} s (timeout {timeout_s:g} s)",
            f"  ranks still waiting: {_ranks(waiting)}",
            f"  ranks finished: {_ranks(finished) if finished else 'none'}",
            timeout_hint,
        ]
        for rank, stack in self._dump_stacks(waiting).items():
            lines += [f"--- stack of waiting rank {rank} ---", stack]
        return "\n".join(lines)

    def _dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask each rank's faulthandler for its Python stack; it answers even while blocked inside a C++ collective."""
        if _STACK_SIGNAL is None or self._tmpdir is None:
            return {}
        files = {rank: _stack_file(self._tmpdir, rank) for rank in ranks}
        for rank in ranks:
            pid = self._processes[rank].pid
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, _STACK_SIGNAL)
        sizes: dict[int, int] = {}
        deadline = time.monotonic() + _STACK_DUMP_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
            current = {rank: _file_size(path) for rank, path in files.items()}
            if current == sizes and all(current.values()):
                break
            sizes = current
        stacks = {}
        for rank, path in files.items():
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").strip()
                if text:
                    stacks[rank] = text
        return stacks

    def _teardown(self) -> None:
        """Terminate, then kill, whatever ranks are left; drop the pipes and the rendezvous dir."""
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + _KILL_GRACE_S
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        for conn in self._conns:
            conn.close()
        self._processes = []
        self._conns = []
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


RANK_START_HOOKS: list[Callable[[int, int], None]] = []
"""Picklable module-level functions every rank calls once its process group is up and ``rank_setup`` has run, before
its first task: a watch over the rank's state takes its baseline there (the session watch registers one)."""

_live_pools: weakref.WeakSet[RankPool] = weakref.WeakSet()
_cached_pools: dict[tuple[int, str, Callable[[int, int], None] | None], RankPool] = {}


def get_pool(
    world_size: int, placement: str = "gloo", rank_setup: Callable[[int, int], None] | None = None
) -> RankPool:
    """The pool of this process (one per xdist worker) for ``world_size``, ``placement`` and ``rank_setup``."""
    key = (world_size, placement, rank_setup)
    pool = _cached_pools.get(key)
    if pool is None:
        pool = _cached_pools[key] = RankPool(world_size, placement, rank_setup=rank_setup)
    return pool


def cached_pools() -> list[RankPool]:
    """The pools :func:`get_pool` keeps in this process that have ranks running now."""
    return [pool for pool in _cached_pools.values() if pool.running]


def close_all_pools() -> None:
    """Close every pool of this process, cached or not; cached pools are forgotten, so ``get_pool`` makes new ones."""
    # Listed before the cache lets go of them: a pool only the cache held would leave the weak set unclosed.
    pools = list(_live_pools)
    _cached_pools.clear()
    for pool in pools:
        pool.close()


# Registered after multiprocessing's own exit hook, so it runs first: that hook joins non-daemon children forever.
atexit.register(close_all_pools)


def _describe_fn(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _ranks(ranks: set[int] | list[int]) -> str:
    return ", ".join(f"rank {rank}" for rank in sorted(ranks))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _stack_file(tmpdir: Path, rank: int) -> Path:
    return tmpdir / f"rank{rank}.stack"


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _pin_upstream() -> None:
    """Pin Megatron's upstream functions before the rank runs anything else, so before any task loads a subject
    (``harness.ranks.megatron_state.pin_upstream``: a no-op without Megatron, and it never raises)."""
    from harness.ranks import megatron_state

    megatron_state.pin_upstream()


def _failure(exc: BaseException) -> RankFailure:
    return RankFailure(
        f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
        str(exc),
        "".join(traceback.format_exception(exc)),
    )


def _reply(conn: multiprocessing.connection.Connection, kind: str, value: Any) -> None:
    try:
        payload = pickle.dumps((kind, value))
    except Exception as exc:
        failure = _failure(exc)
        note = f"the task's result ({type(value).__name__}) could not be pickled: {failure.headline()}"
        payload = pickle.dumps((_RAISED, RankFailure("ResultNotPicklable", note, failure.traceback)))
    conn.send_bytes(payload)


def _rank_main(
    rank: int,
    world_size: int,
    placement: str,
    tmpdir: str,
    conn: multiprocessing.connection.Connection,
    parent_pid: int,
    rank_setup: Callable[[int, int], None] | None,
    start_hooks: tuple[Callable[[int, int], None], ...] = (),
) -> None:
    """Body of one rank process: join the group, then run tasks until told to stop or the parent goes away."""
    die_with_parent(parent_pid)
    # A no-op in a rank forked from the fork server; a spawned rank imports what the server would have, first.
    importlib.import_module(FORKSERVER_PRELOAD[0])
    _pin_upstream()
    # Ctrl-C reaches the whole process group; the parent handles it and tears the ranks down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stack_file = None
    if _STACK_SIGNAL is not None:
        stack_file = _stack_file(Path(tmpdir), rank).open("w")
        faulthandler.register(_STACK_SIGNAL, file=stack_file, all_threads=True)
    try:
        import torch
        import torch.distributed as dist

        if "OMP_NUM_THREADS" not in os.environ:
            # As torchrun does: ranks that each use every core oversubscribe the machine world_size times over.
            torch.set_num_threads(1)
        backend = enter_rank(placement, rank)
        store = dist.FileStore(os.path.join(tmpdir, "rendezvous"), world_size)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
        if rank_setup is not None:
            rank_setup(rank, world_size)
        for hook in start_hooks:
            hook(rank, world_size)
    except Exception as exc:
        _reply(conn, _RAISED, _failure(exc))
        return
    _reply(conn, _OK, os.getpid())
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            break
        try:
            message = pickle.loads(payload)
            if message[0] == _STOP:
                break
            _, fn, args, kwargs = message
            result = fn(rank, world_size, *args, **kwargs)
        except Exception as exc:
            _reply(conn, _RAISED, _failure(exc))
        else:
            _reply(conn, _OK, result)
    dist.destroy_process_group()
    if stack_file is not None:
        faulthandler.unregister(_STACK_SIGNAL)
        stack_file.close()
