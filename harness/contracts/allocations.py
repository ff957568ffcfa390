"""Tensors allocated during a block of code: the peak of their live bytes, the largest, and the devices they were
made on.

Collective message sizes say nothing about memory: a subject may flatten every grad into one buffer and all-reduce
budget-sized views of it. :class:`AllocationTracker` is a ``TorchDispatchMode``, so it sees every ATen op run inside
the block, whoever calls it (the subject, upstream, ``torch._utils._flatten_dense_tensors``, a factory such as
``torch.empty``). An output tensor whose storage is none of the op's inputs' storages and not one already tracked is
a new allocation: its storage's ``nbytes`` (the bytes really held, a view's base included) and device are recorded,
with the op that made it.

A storage dies when its last reference goes (a tensor, a view of it, or a Python object holding one). The tracker
keeps a ``StorageWeakRef`` per tracked storage and asks whether it expired whenever a new allocation comes in: live
bytes can only rise at an allocation, so the peak of live bytes over the block is exactly the largest sum of the
storages still alive just after each allocation. (A Python finalizer on the ``UntypedStorage`` object fires when that
wrapper dies, not the storage; one on the tensor misses a view that outlives it.)

What it cannot see: memory a C++ kernel allocates for itself without returning it as a tensor (gloo's and NCCL's
internal buffers, workspace of a fused kernel), tensors made outside the block (a buffer cached at import), and
``torch.tensor(data)`` whose storage is filled outside the dispatcher (it is lifted, not allocated, as far as ops
go: a few bytes for scalars).

On CUDA the tracker counts in the caching allocator's terms (:mod:`harness.contracts.cuda_allocator`): each new
storage as the block it takes, not its bytes; ``torch.cuda.max_memory_allocated`` above the block's starting level is
read as well, and the peak is the larger of the two (the allocator sees kernel workspace the ops do not). Reserved
memory (segments cached for later blocks) is read and kept apart: it is the allocator's cache, not what the subject
holds, and is never judged. ``allocator="cuda"`` applies the same block rules to tensors on the CPU, so a machine
without a GPU can see the verdict a GPU would give on the same allocations.

The equivalence family's memory bound lives here too, beside the summary it judges: how many bytes a subject may hold
at once during its call (:data:`MEMORY_BOUND_CHUNKS` chunks of the budget). The problems a rank reports when its peak
exceeds that are written by :mod:`harness.contracts.rank_report`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from harness.contracts.cuda_allocator import allocated_bytes_at_most, block_bytes

ALLOCATORS = ("host", "cuda")
"""How a new storage is counted: its bytes (``host``), or the CUDA caching allocator's block for it (``cuda``)."""

MEMORY_BOUND_CHUNKS = 8
"""How many chunk-sized buffers a subject may hold at once during its call (see ``memory_bound``)."""


@dataclass(frozen=True)
class Allocation:
    """One new storage: the op that made it, its bytes as counted (a CUDA block under the ``cuda`` allocator) and its
    device (``cpu``, ``cuda:0``)."""

    op: str
    nbytes: int
    device: str


@dataclass
class AllocationSummary:
    """What a tracked block allocated, picklable (the rank sends it back)."""

    peak_bytes: int = 0
    """Peak of live bytes allocated in the block (the larger of the tracked and, on CUDA, the allocator's peak)."""
    tracked_peak_bytes: int = 0
    cuda_peak_bytes: int | None = None
    """``max_memory_allocated`` above the starting level, on a CUDA device."""
    cuda_reserved_peak_bytes: int | None = None
    """``max_memory_reserved`` above the starting level, on a CUDA device: reported, never judged."""
    allocator: str = "host"
    largest_bytes: int = 0
    count: int = 0
    total_bytes: int = 0
    allocations: list[Allocation] = field(default_factory=list)

    def on_other_devices(self, device: torch.device | str) -> list[Allocation]:
        """The allocations made on any device but ``device`` (the grads')."""
        wanted = str(torch.device(device))
        return [a for a in self.allocations if a.device != wanted]


class AllocationTracker(TorchDispatchMode):
    """Tracks tensors created while active; ``summary()`` after the block (also valid inside it).

    ``device`` is where the tracked code's tensors live: on a CUDA device the allocator's own peaks are read too.
    ``allocator`` is how a new storage on ``device`` (and on any CUDA device) is counted; by default the device
    decides (``cuda`` on a CUDA device, else ``host``). ``keep`` bounds how many allocations are listed one by one
    (counts and bytes cover them all).
    """

    def __init__(self, device: torch.device | str | None = None, keep: int = 64, allocator: str | None = None) -> None:
        super().__init__()
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.allocator = allocator or ("cuda" if self.device is not None and self.device.type == "cuda" else "host")
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {ALLOCATORS}, got {self.allocator!r}")
        self.keep = keep
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self._live_bytes = 0
        self._summary = AllocationSummary(allocator=self.allocator)
        self._cuda_base: tuple[int, int] | None = None

    def __enter__(self) -> AllocationTracker:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._cuda_base = (torch.cuda.memory_allocated(self.device), torch.cuda.memory_reserved(self.device))
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self._cuda_base is not None:
            torch.cuda.synchronize(self.device)
            allocated, reserved = self._cuda_base
            self._summary.cuda_peak_bytes = max(0, torch.cuda.max_memory_allocated(self.device) - allocated)
            self._summary.cuda_reserved_peak_bytes = max(0, torch.cuda.max_memory_reserved(self.device) - reserved)
        self._summary.peak_bytes = max(self._summary.tracked_peak_bytes, self._summary.cuda_peak_bytes or 0)

    def summary(self) -> AllocationSummary:
        return self._summary

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inputs = {_storage_ptr(t) for t in _tensors((args, kwargs))}
        out = func(*args, **kwargs)
        for tensor in _tensors(out):
            self._note(tensor, inputs, func)
        return out

    def _note(self, tensor: torch.Tensor, inputs: set[int], func: Any) -> int | None:
        """Track ``tensor``'s storage if it is a new allocation; its bytes as counted, else None."""
        ptr = _storage_ptr(tensor)
        if ptr == 0 or ptr in inputs:
            return None
        self._prune()
        if ptr in self._live:
            return None
        storage = tensor.untyped_storage()
        nbytes = self._counted(storage.nbytes(), tensor.device)
        self._live[ptr] = (StorageWeakRef(storage), nbytes)
        self._live_bytes += nbytes
        summary = self._summary
        summary.tracked_peak_bytes = max(summary.tracked_peak_bytes, self._live_bytes)
        summary.peak_bytes = max(summary.peak_bytes, summary.tracked_peak_bytes)
        summary.largest_bytes = max(summary.largest_bytes, nbytes)
        summary.count += 1
        summary.total_bytes += nbytes
        allocation = Allocation(str(func), nbytes, str(tensor.device))
        if len(summary.allocations) < self.keep or allocation.device != str(self.device or allocation.device):
            summary.allocations.append(allocation)
        return nbytes

    def _counted(self, nbytes: int, device: torch.device) -> int:
        """A storage's bytes as this tracker's allocator counts them."""
        on_cuda = device.type == "cuda" or (self.device is not None and device == self.device)
        return block_bytes(nbytes) if self.allocator == "cuda" and on_cuda else nbytes

    def _prune(self) -> None:
        for ptr, (ref, nbytes) in list(self._live.items()):
            if ref.expired():
                del self._live[ptr]
                self._live_bytes -= nbytes


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in an op's arguments or outputs (tensors, lists and tuples of them, keyword dicts); a plain walk,
    several times cheaper per op than ``torch.utils._pytree``."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _storage_ptr(tensor: torch.Tensor) -> int:
    """The address of the tensor's storage (its base, for a view); 0 for no storage or no address."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def memory_bound(
    budget: int, largest: int, widest_element: int, smallest_element: int, allocator: str = "host"
) -> tuple[int, int]:
    """``(chunk, bound)``: the bytes one chunk's buffer may take, and the most bytes of tensors a subject may hold at
    once during its call.

    ``chunk = max(budget, largest grad) x widest / smallest``: a chunk holds at most the budget, or one grad over it,
    flattened in the dtype the reduced grads promote to (bf16 with fp16 gives fp32), as upstream's single buffer is.
    Under the ``cuda`` allocator a chunk is counted as the most the caching allocator may count for it (its block, and
    for a large one the unsplit remainder: :func:`~harness.contracts.cuda_allocator.allocated_bytes_at_most`).
    ``bound = MEMORY_BOUND_CHUNKS x chunk``, a constant multiple, so the verdict never depends on timing: a design
    whose memory is O(budget) holds a few chunks at once (the one being reduced, the previous one still bound to a
    loop variable, the one gloo's worker thread drops a moment after ``all_reduce`` returns, one per op and two in
    flight for an overlapping design) and stays far below it; a design that holds every grad at once exceeds it many
    times over on the populations sized for it (the largest-buffer case: 64 grads of one chunk each).
    """
    chunk = max(budget, largest) * widest_element // smallest_element
    if allocator == "cuda":
        chunk = allocated_bytes_at_most(chunk)
    return chunk, chunk * MEMORY_BOUND_CHUNKS
