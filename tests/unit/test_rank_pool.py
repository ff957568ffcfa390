"""The rank pool runs real distributed tasks, and turns every way a rank can fail into a prompt, readable red.

These drive real gloo process groups on CPU (torch only, no Megatron). Restarting ranks costs seconds on a small
machine, so the tests share one pool and warm it before timing anything: a failure test's clock measures the failure,
not the torch import.
"""

from __future__ import annotations

import inspect
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.ranks import fork_server
from harness.ranks.placement import skip_reason, this_machine
from harness.ranks.pool import (
    START_TIMEOUT_S,
    TIMEOUT_ENV_VAR,
    RankDied,
    RankPool,
    RankPoolError,
    RankRaised,
    RankTimeout,
    close_all_pools,
    default_timeout_s,
    get_pool,
)
from tests import rank_tasks

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0
WARM_RUN_BOUND_S = 0.5


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    pool = RankPool(2, timeout_s=TIMEOUT_S, rank_setup=rank_tasks.mark_env)
    yield pool
    pool.close()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie nobody reaped yet counts as gone."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.parent.parent.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], within_s: float) -> list[int]:
    """The pids still running after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    alive = [pid for pid in pids if _running(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _running(pid)]
    return alive


def _median_run_s(pool: RankPool, runs: int) -> float:
    durations = []
    for _ in range(runs):
        started = time.perf_counter()
        pool.run(rank_tasks.scalar_all_reduce)
        durations.append(time.perf_counter() - started)
    return statistics.median(durations)


def test_results_come_back_in_rank_order(pool: RankPool) -> None:
    results = pool.run(rank_tasks.identify, tag="hello")
    assert [(rank, world_size, tag) for rank, world_size, _, tag in results] == [(0, 2, "hello"), (1, 2, "hello")]
    assert [pid for _, _, pid, _ in results] == pool.pids


def test_all_reduce_sums_across_ranks(pool: RankPool) -> None:
    # Ranks contribute 1 + 0.5 and 2 + 0.5.
    assert pool.run(rank_tasks.all_reduce_sum, 0.5) == [4.0, 4.0]


def test_tensor_results_come_back_by_value(pool: RankPool) -> None:
    first, second = pool.run(rank_tasks.rank_tensor, 1000)
    assert torch.equal(first, torch.arange(1000, dtype=torch.float32))
    assert torch.equal(second, 2 * torch.arange(1000, dtype=torch.float32))
    first += 1
    assert torch.equal(pool.run(rank_tasks.rank_tensor, 1000)[0], torch.arange(1000, dtype=torch.float32))


def test_rank_setup_runs_in_every_rank(pool: RankPool) -> None:
    assert pool.run(rank_tasks.read_env, "RANK_POOL_SETUP_MARK") == ["0/2", "1/2"]


def test_ranks_are_reused_across_runs(pool: RankPool) -> None:
    pool.start()
    generation = pool.generation
    first = [pid for *_, pid, _ in pool.run(rank_tasks.identify)]
    second = [pid for *_, pid, _ in pool.run(rank_tasks.identify)]
    assert first == second == pool.pids
    assert pool.generation == generation


def test_a_warm_task_costs_milliseconds(pool: RankPool) -> None:
    pool.start()
    # About a millisecond when idle; respawning ranks per run would cost seconds. The slack is for loaded CI machines.
    assert _median_run_s(pool, 20) < WARM_RUN_BOUND_S


def test_raise_in_one_rank_fails_promptly_with_its_traceback(pool: RankPool) -> None:
    pool.start()
    generation, pids = pool.generation, pool.pids
    started = time.monotonic()
    with pytest.raises(RankRaised) as info:
        pool.run(rank_tasks.raise_on_ranks, (1,), timeout_s=TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S / 2
    message = str(info.value)
    assert "rank 1 raised ValueError: deliberate failure on rank 1" in message
    assert "traceback from rank 1" in message
    source, first_line = inspect.getsourcelines(rank_tasks.raise_on_ranks)
    offset = next(i for i, line in enumerate(source) if "raise ValueError" in line)
    assert f'rank_tasks.py", line {first_line + offset}, in raise_on_ranks' in message
    assert source[offset].strip() in message
    assert "still running" in message and "rank 0" in message
    assert set(info.value.failures) == {1}
    assert not pool.running
    assert pool.run(rank_tasks.all_reduce_sum) == [3.0, 3.0]
    assert pool.generation == generation + 1
    assert set(pool.pids).isdisjoint(pids)


def test_state_tasks_are_replayed_on_the_ranks_a_failure_restarted(pool: RankPool) -> None:
    """A case's setup (its model-parallel groups) must hold for the task after a failed one, or that task fails for
    a reason of its own and hides the first failure."""
    pool.run(rank_tasks.set_env, "RANK_POOL_STATE", "set")
    pool.state_tasks.append((rank_tasks.set_env, ("RANK_POOL_STATE", "set")))
    try:
        with pytest.raises(RankRaised):
            pool.run(rank_tasks.raise_on_ranks, (1,), timeout_s=TIMEOUT_S)
        assert pool.run(rank_tasks.read_env, "RANK_POOL_STATE") == ["set", "set"]
    finally:
        pool.state_tasks.clear()
    with pytest.raises(RankRaised):
        pool.run(rank_tasks.raise_on_ranks, (1,), timeout_s=TIMEOUT_S)
    assert pool.run(rank_tasks.read_env, "RANK_POOL_STATE") == [None, None]


def test_skipped_collective_times_out_naming_the_waiting_rank(pool: RankPool) -> None:
    pool.start()
    generation = pool.generation
    started = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        pool.run(rank_tasks.skip_collective_on_rank, 1, timeout_s=3)
    assert 3 <= time.monotonic() - started < TIMEOUT_S / 2
    assert (info.value.waiting, info.value.finished) == ([0], [1])
    message = str(info.value)
    assert "ranks still waiting: rank 0" in message
    assert "ranks finished: rank 1" in message
    assert "stack of waiting rank 0" in message and "in skip_collective_on_rank" in message
    assert pool.run(rank_tasks.all_reduce_sum) == [3.0, 3.0]
    assert pool.generation == generation + 1


def test_killed_rank_is_reported_promptly_with_its_signal(pool: RankPool) -> None:
    pool.start()
    generation, victim = pool.generation, pool.pids[1]
    started = time.monotonic()
    with pytest.raises(RankDied) as info:
        pool.run(rank_tasks.kill_rank, 1, timeout_s=TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S / 2
    assert info.value.deaths == {1: "was killed by SIGKILL"}
    assert f"rank 1 (pid {victim}) was killed by SIGKILL" in str(info.value)
    assert pool.run(rank_tasks.all_reduce_sum) == [3.0, 3.0]
    assert pool.generation == generation + 1


def test_failures_are_assertion_errors() -> None:
    for error in (RankRaised, RankTimeout, RankDied):
        assert issubclass(error, RankPoolError)
    assert issubclass(RankPoolError, AssertionError)


def test_failed_setup_fails_the_start_with_its_traceback() -> None:
    broken = RankPool(1, rank_setup=rank_tasks.fail_setup)
    try:
        with pytest.raises(RankRaised, match=r"pool start[\s\S]*RuntimeError: setup refused on rank 0") as info:
            broken.start()
        assert "in fail_setup" in str(info.value)
        assert not broken.running
    finally:
        broken.close()


def test_unpicklable_task_is_refused_without_touching_the_ranks(pool: RankPool) -> None:
    pool.start()
    generation, pids = pool.generation, pool.pids
    with pytest.raises(TypeError, match="module-level functions"):
        pool.run(lambda rank, world_size: rank)
    assert (pool.generation, pool.pids) == (generation, pids)


def test_close_stops_every_rank_and_removes_the_rendezvous_dir(pool: RankPool) -> None:
    pool.start()
    pids, rendezvous = pool.pids, pool.rendezvous_dir
    assert len(pids) == 2 and rendezvous is not None and rendezvous.is_dir()
    pool.close()
    assert (pool.pids, pool.rendezvous_dir) == ([], None)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not rendezvous.exists()


# The child never imports torch itself (only its ranks do), to keep the test quick; operator.add(rank, world_size) is
# a picklable module-level task.
CHILD = textwrap.dedent(
    """
    import operator, os, signal, sys
    from harness.ranks.pool import RankPool

    pool = RankPool(2)
    assert pool.run(operator.add) == [2, 3]
    print(*pool.pids, flush=True)
    if sys.argv[1] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_no_rank_outlives_its_parent(ending: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if ending == "sigkill" and not sys.platform.startswith("linux"):
        pytest.skip("parent-death signals are Linux only")
    out = tmp_path / "pids"
    # A short TMPDIR: the fork server's socket lives there, and pytest's tmp_path can exceed a socket path's length.
    child_tmp = Path(tempfile.mkdtemp(prefix="rank-pool-test-"))
    request.addfinalizer(lambda: shutil.rmtree(child_tmp, ignore_errors=True))
    with out.open("w") as stdout:
        # A file, not a pipe, so that surviving ranks cannot hold the parent's read open.
        child = subprocess.run(
            [sys.executable, "-c", CHILD, ending],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(child_tmp)},
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=START_TIMEOUT_S + 60,
        )
    assert child.returncode == (0 if ending == "exit" else -9), child.stderr
    pids = [int(pid) for pid in out.read_text().split()]
    assert len(pids) == 2
    survivors = _wait_gone(pids, within_s=10.0)
    for pid in survivors:
        os.kill(pid, 9)
    assert survivors == [], f"rank processes {survivors} outlived a parent that ended by {ending}"
    if ending == "exit":
        # Only a clean close removes the rendezvous dir: the exit hook ran, not just the parent-death signal.
        # (Other entries may appear: the fork server imports torch and Megatron, which keep caches in TMPDIR.)
        assert list(child_tmp.glob("rank-pool-*")) == []


def test_world_size_four_reports_every_rank_that_raised() -> None:
    pool = RankPool(4, timeout_s=TIMEOUT_S)
    try:
        results = pool.run(rank_tasks.identify)
        assert [rank for rank, *_ in results] == [0, 1, 2, 3]
        assert pool.run(rank_tasks.all_reduce_sum) == [10.0] * 4
        assert _median_run_s(pool, 20) < WARM_RUN_BOUND_S
        started = time.monotonic()
        with pytest.raises(RankRaised) as info:
            pool.run(rank_tasks.raise_on_ranks, (1, 3))
        assert time.monotonic() - started < TIMEOUT_S / 2
        assert set(info.value.failures) == {1, 3}
        message = str(info.value)
        assert "2 ranks raised" in message
        assert "traceback from rank 1" in message and "traceback from rank 3" in message
        assert "still running (likely waiting in a collective for the failed rank): rank 0, rank 2" in message
    finally:
        pool.close()


_NCCL_SKIP = skip_reason("nccl", 2, this_machine())
_CUDA_SKIP = skip_reason("cuda-gloo", 2, this_machine())


@pytest.mark.skipif(_NCCL_SKIP is not None, reason=str(_NCCL_SKIP))
def test_nccl_pool_runs_on_one_gpu_per_rank() -> None:
    pool = RankPool(2, "nccl")
    try:
        assert pool.run(rank_tasks.cuda_all_reduce) == [(0, 3.0, "cuda:0"), (1, 3.0, "cuda:1")]
    finally:
        pool.close()


@pytest.mark.skipif(_CUDA_SKIP is not None, reason=str(_CUDA_SKIP))
def test_two_ranks_share_one_gpu_over_gloo() -> None:
    """The one-GPU mode: CUDA grads on every rank, reduced by gloo, whatever the number of GPUs."""
    pool = RankPool(2, "cuda-gloo")
    try:
        results = pool.run(rank_tasks.cuda_all_reduce)
        assert [value for _, value, _ in results] == [3.0, 3.0]
        assert all(device.startswith("cuda:") for _, _, device in results)
    finally:
        pool.close()


def test_an_unknown_placement_is_refused_before_any_rank_starts() -> None:
    with pytest.raises(ValueError, match="placement must be one of gloo, cuda-gloo, nccl"):
        RankPool(2, "mpi")


def test_timeout_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV_VAR, raising=False)
    assert default_timeout_s() == 120.0
    monkeypatch.setenv(TIMEOUT_ENV_VAR, "7.5")
    assert default_timeout_s() == 7.5
    monkeypatch.setenv(TIMEOUT_ENV_VAR, "soon")
    with pytest.raises(ValueError, match=TIMEOUT_ENV_VAR):
        default_timeout_s()


def test_get_pool_keeps_one_pool_per_world_size_and_backend() -> None:
    try:
        first = get_pool(2)
        assert get_pool(2) is first
        assert get_pool(2, "gloo") is first
        assert get_pool(3) is not first
        assert get_pool(2, "nccl") is not first
        assert get_pool(2, "cuda-gloo") is not first
        assert get_pool(2, rank_setup=rank_tasks.mark_env) is not first
        close_all_pools()
        assert get_pool(2) is not first
    finally:
        close_all_pools()


def test_close_all_pools_closes_a_pool_only_the_cache_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[int] = []
    monkeypatch.setattr(RankPool, "close", lambda self: closed.append(self.world_size))
    get_pool(3)
    close_all_pools()
    assert 3 in closed, "the pool the cache alone held was let go of without being closed"


def test_ranks_are_spawned_where_the_fork_server_socket_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fork_server.rank_context().get_start_method() == "forkserver"
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "d" * 80)
    assert fork_server.rank_context().get_start_method() == "spawn"


def test_a_pool_starts_under_a_long_tmpdir(tmp_path: Path) -> None:
    """The fallback in action: a TMPDIR too long for the fork server's socket still gets working ranks."""
    long_tmp = tmp_path / ("d" * 80)
    long_tmp.mkdir()
    code = "from harness.ranks.pool import RankPool; import operator; print(RankPool(2).run(operator.add))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(long_tmp)}
    child = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.strip().splitlines()[-1] == "[2, 3]"
