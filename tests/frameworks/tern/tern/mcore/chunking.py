"""Budget-bounded splitting of a list of grads into flattened chunks.

All budgets are in MiB (1 MiB = 1024 * 1024 bytes); fractional values are allowed.
torch is imported lazily, inside the functions that need it.
"""

import math
import numbers
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

_BYTES_PER_MIB = 1024 * 1024


class Segment(NamedTuple):
    """Elements ``[start, stop)`` of ``tensors[index].reshape(-1)``."""

    index: int
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start


def mib_to_bytes(bucket_mb: float) -> int:
    """Convert a MiB budget to whole bytes (floored). Raises ValueError unless it is a
    finite number > 0 that amounts to at least one byte."""
    if isinstance(bucket_mb, bool) or not isinstance(bucket_mb, numbers.Real):
        raise TypeError(f"bucket_mb must be a real number of MiB, got {bucket_mb!r}")
    value = float(bucket_mb)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"bucket_mb must be a finite number > 0 (MiB), got {bucket_mb!r}")
    nbytes = int(value * _BYTES_PER_MIB)
    if nbytes < 1:
        raise ValueError(f"bucket_mb={bucket_mb!r} MiB is less than one byte")
    return nbytes


def coalesced_dtype(tensors: Sequence["torch.Tensor"]) -> "torch.dtype":
    """The dtype torch's ``_flatten_dense_tensors`` (i.e. ``torch.cat``) gives the
    coalesced buffer of ``tensors``: the type promotion of all their dtypes."""
    import torch

    if not tensors:
        raise ValueError("coalesced_dtype() needs at least one tensor")
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def split_into_chunks(
    tensors: Sequence["torch.Tensor"],
    bucket_mb: float,
    dtype: Optional["torch.dtype"] = None,
) -> List[List[Segment]]:
    """Split ``tensors`` into chunks whose flattened buffer is at most ``bucket_mb`` MiB.

    The tensors are viewed as one stream of elements, in order (exactly the layout of
    upstream's single coalesced buffer), and that stream is cut into consecutive windows
    of ``floor(bucket_bytes / itemsize)`` elements, where ``itemsize`` is that of
    ``dtype`` (default: the promoted dtype of all ``tensors``, i.e. the dtype of
    upstream's coalesced buffer). A tensor larger than the window, or straddling a window
    boundary, is split across chunks.

    Returns a list of chunks; each chunk is a non-empty list of ``Segment(index, start,
    stop)`` meaning elements ``[start, stop)`` of ``tensors[index].reshape(-1)``. Every
    chunk holds at most the budget's worth of bytes; the concatenation of all chunks
    covers every element of every tensor exactly once, in order. Tensors with no elements
    produce no segment. An empty input (or only empty tensors) returns ``[]``.

    Raises TypeError/ValueError for an invalid budget, or if one element of ``dtype``
    does not fit in the budget.
    """
    nbytes = mib_to_bytes(bucket_mb)
    if len(tensors) == 0:
        return []
    if dtype is None:
        dtype = coalesced_dtype(tensors)
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    capacity = nbytes // itemsize
    if capacity < 1:
        raise ValueError(
            f"bucket_mb={bucket_mb!r} MiB ({nbytes} bytes) cannot hold one {dtype} element "
            f"({itemsize} bytes)"
        )

    chunks: List[List[Segment]] = []
    current: List[Segment] = []
    room = capacity
    for index, t in enumerate(tensors):
        numel = t.numel()
        start = 0
        while start < numel:
            take = min(room, numel - start)
            current.append(Segment(index, start, start + take))
            start += take
            room -= take
            if room == 0:
                chunks.append(current)
                current = []
                room = capacity
    if current:
        chunks.append(current)
    return chunks
