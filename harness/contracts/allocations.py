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
go: a few bytes for scalars). On CUDA, ``torch.cuda.max_memory_allocated`` above the block's starting level is
taken as well, and the peak is the larger of the two: the caching allocator sees kernel workspace the ops do not,
and rounds every block up to a multiple of 512 bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

CUDA_BLOCK_BYTES = 512
"""The CUDA caching allocator rounds every allocation up to a multiple of this."""


@dataclass(frozen=True)
class Allocation:
    """One new storage: the op that made it, its bytes and its device (``cpu``, ``cuda:0``)."""

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

    ``device`` is where the tracked code's tensors live: on a CUDA device the allocator's own peak is read too.
    ``keep`` bounds how many allocations are listed one by one (counts and bytes cover them all).
    """

    def __init__(self, device: torch.device | str | None = None, keep: int = 64) -> None:
        super().__init__()
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.keep = keep
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self._live_bytes = 0
        self._summary = AllocationSummary()
        self._cuda_base: int | None = None

    def __enter__(self) -> AllocationTracker:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._cuda_base = torch.cuda.memory_allocated(self.device)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self._cuda_base is not None:
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - self._cuda_base
            self._summary.cuda_peak_bytes = max(0, peak)
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

    def _note(self, tensor: torch.Tensor, inputs: set[int], func: Any) -> None:
        ptr = _storage_ptr(tensor)
        if ptr == 0 or ptr in inputs:
            return
        self._prune()
        if ptr in self._live:
            return
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
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
