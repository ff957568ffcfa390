"""Where a case's ranks keep their grads and which backend reduces them: the placements, and which one a machine can
run.

- ``gloo``: CPU tensors, gloo. Every machine.
- ``cuda-gloo``: CUDA tensors, gloo (which copies them through host memory), the ranks sharing the GPUs (rank ``r``
  on GPU ``r mod count``). Any machine with one GPU or more: the one-GPU mode, where the subject's and upstream's
  memory is the caching allocator's and their kernels CUDA's, though the collective is not NCCL.
- ``nccl``: CUDA tensors, NCCL, one GPU per rank. Only where the machine has a GPU for every rank.

The decision is a pure function of what the machine has (:class:`Machine`), so it is tested on a CPU machine; every
refusal says which GPUs were found, how many are needed, and for which placement.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """One way of running a case's ranks: its name (the case id), its backend and the device type of the grads."""

    name: str
    backend: str
    device_type: str
    description: str

    def gpus_needed(self, world_size: int) -> int:
        """How many GPUs the placement needs for ``world_size`` ranks."""
        if self.device_type == "cpu":
            return 0
        return world_size if self.backend == "nccl" else 1

    def rank_device(self, rank: int, gpus: int) -> str:
        """The device rank ``rank`` keeps its grads on, on a machine with ``gpus`` GPUs."""
        if self.device_type == "cpu":
            return "cpu"
        return f"cuda:{rank % gpus}"


GLOO = Placement("gloo", "gloo", "cpu", "gloo over CPU tensors")
CUDA_GLOO = Placement("cuda-gloo", "gloo", "cuda", "gloo over CUDA tensors, the ranks sharing the GPUs")
NCCL = Placement("nccl", "nccl", "cuda", "NCCL over CUDA tensors, one GPU per rank")
PLACEMENTS = {p.name: p for p in (GLOO, CUDA_GLOO, NCCL)}
CUDA = "cuda"
"""The name a case uses for "on CUDA, however this machine can": NCCL where every rank has a GPU, else ``cuda-gloo``."""


@dataclass(frozen=True)
class Machine:
    """What the rank processes could use: the torch build and the GPUs it sees."""

    torch_version: str
    cuda_build: bool
    gpus: int
    gloo: bool = True
    nccl: bool = False

    def describe(self) -> str:
        build = "a CUDA build" if self.cuda_build else "a CPU-only build"
        return f"{self.gpus} GPU(s) found (torch {self.torch_version}, {build})"


def this_machine() -> Machine:
    """The machine as torch in this process sees it; CUDA is not initialised by asking."""
    import torch
    import torch.distributed as dist

    cuda_build = torch.version.cuda is not None
    gpus = torch.cuda.device_count() if cuda_build else 0
    available = dist.is_available()
    return Machine(
        torch.__version__,
        cuda_build,
        gpus,
        gloo=available and dist.is_gloo_available(),
        nccl=available and dist.is_nccl_available(),
    )


def resolve(name: str, world_size: int, machine: Machine) -> Placement:
    """The placement ``name`` stands for on ``machine`` (``cuda`` picks NCCL or the one-GPU mode)."""
    if name == CUDA:
        return NCCL if machine.nccl and machine.gpus >= world_size else CUDA_GLOO
    try:
        return PLACEMENTS[name]
    except KeyError:
        known = ", ".join([*PLACEMENTS, CUDA])
        raise ValueError(f"no placement named {name!r} (known: {known})") from None


def skip_reason(name: str, world_size: int, machine: Machine) -> str | None:
    """Why ``world_size`` ranks cannot run under placement ``name`` on ``machine``, or None when they can."""
    placement = resolve(name, world_size, machine)
    needed = placement.gpus_needed(world_size)
    what = f"placement {placement.name} ({placement.description}) with {world_size} ranks"
    if placement.backend == "gloo" and not machine.gloo:
        return f"{what}: torch {machine.torch_version} has no gloo"
    if needed == 0:
        return None
    if not machine.cuda_build or machine.gpus < needed:
        return f"{what} needs {needed} GPU(s); {machine.describe()}"
    if placement.backend == "nccl" and not machine.nccl:
        return f"{what}: torch {machine.torch_version} has no NCCL"
    return None


_rank_device = ["cpu"]


def enter_rank(name: str, rank: int) -> str:
    """In a rank process, before its process group is made: select the GPU placement ``name`` gives ``rank`` and
    remember it as the rank's device; returns the backend to join the group with."""
    placement = PLACEMENTS[name]
    if placement.device_type == "cuda":
        import torch

        device = placement.rank_device(rank, torch.cuda.device_count())
        torch.cuda.set_device(device)
        _rank_device[0] = device
    return placement.backend


def rank_device() -> str:
    """Where this rank keeps its grads (``cpu`` outside a rank, and in a rank placed on the CPU)."""
    return _rank_device[0]


def gpu_refusal(machine: Machine) -> str | None:
    """Why ``nox -s gpu`` cannot run on ``machine`` (no GPU torch can use), or None when it can."""
    if machine.cuda_build and machine.gpus > 0:
        return None
    return f"nox -s gpu needs a CUDA GPU that torch can use: {machine.describe()}"
