"""Tasks the rank-pool tests send to the ranks: module level, so that a spawned rank can unpickle them by name."""

from __future__ import annotations

import importlib
import os
import signal

import torch
import torch.distributed as dist


def identify(rank: int, world_size: int, tag: str = "") -> tuple[int, int, int, str]:
    return rank, world_size, os.getpid(), tag


def all_reduce_sum(rank: int, world_size: int, offset: float = 0.0) -> float:
    value = torch.tensor([rank + 1 + offset], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.item()


def scalar_all_reduce(rank: int, world_size: int) -> None:
    dist.all_reduce(torch.ones(()))


def rank_tensor(rank: int, world_size: int, size: int) -> torch.Tensor:
    return torch.arange(size, dtype=torch.float32) * (rank + 1)


def cuda_all_reduce(rank: int, world_size: int) -> tuple[int, float, str]:
    """A CUDA tensor reduced on the rank's device; with the device its placement gave the rank."""
    from harness.ranks.placement import rank_device

    value = torch.tensor([rank + 1.0], device=torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return torch.cuda.current_device(), value.item(), rank_device()


def raise_on_ranks(rank: int, world_size: int, bad_ranks: tuple[int, ...]) -> None:
    if rank in bad_ranks:
        raise ValueError(f"deliberate failure on rank {rank}")
    # The healthy ranks wait for the failed ones, as a real task would in its next collective.
    dist.barrier()


def skip_collective_on_rank(rank: int, world_size: int, skipping_rank: int) -> int:
    if rank != skipping_rank:
        dist.all_reduce(torch.ones(1))
    return rank


def kill_rank(rank: int, world_size: int, victim: int) -> None:
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def read_env(rank: int, world_size: int, name: str) -> str | None:
    return os.environ.get(name)


def mark_env(rank: int, world_size: int) -> None:
    os.environ["RANK_POOL_SETUP_MARK"] = f"{rank}/{world_size}"


def fail_setup(rank: int, world_size: int) -> None:
    raise RuntimeError(f"setup refused on rank {rank}")


def set_env(rank: int, world_size: int, name: str, value: str) -> None:
    os.environ[name] = value


def parent_pid(rank: int, world_size: int) -> int:
    """The rank's parent: the fork server it was forked from, or the pool's process where ranks are spawned."""
    return os.getppid()


def module_attribute(rank: int, world_size: int, module: str, name: str) -> object:
    """An attribute of a module as the rank finds it (``None`` where it has none)."""
    return getattr(importlib.import_module(module), name, None)


def source_of(rank: int, world_size: int, module: str, name: str) -> str:
    """The source of a module's function as the rank's ``inspect`` reads it."""
    import inspect

    return inspect.getsource(getattr(importlib.import_module(module), name))


def real_step_flattened(rank: int, world_size: int) -> dict[str, int]:
    """The tiny CPU GPT's real step (TP = world, sequence parallel, fp32 main grads): the largest tensor each function
    of the finalize module allocated during upstream's ``finalize_model_grads``, by function."""
    from harness.contracts.step_memory import SiteTracker
    from harness.ranks import cpu_gpt

    with cpu_gpt.cpu_workarounds():
        model, _ = cpu_gpt.build_gpt(seed=11)
        cpu_gpt.forward_backward(model, seed=5)
        with SiteTracker("cpu") as tracker:
            cpu_gpt.finalize(model)
    return tracker.sites


def rebind_barrier(rank: int, world_size: int) -> None:
    """A rank-side patch the session watch must see: ``torch.distributed.barrier`` bound to another function."""

    def barrier(*args: object, **kwargs: object) -> None:
        return None

    dist.barrier = barrier
