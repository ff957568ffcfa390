"""Helpers to split gradients into byte-budgeted chunks and to find grads that
already lie side by side in one storage (so they can be reduced in place).

Only torch is imported here; nothing Megatron-specific.
"""

from typing import List, Optional, Sequence

import torch

__all__ = ["split_into_byte_chunks", "flattened_nbytes", "contiguous_region_view"]


def _itemsize(dtype: torch.dtype) -> int:
    # torch.dtype.itemsize exists on torch >= 2.1; keep a fallback anyway.
    size = getattr(dtype, "itemsize", None)
    if size is None:
        size = torch.empty((), dtype=dtype).element_size()
    return int(size)


def flattened_nbytes(tensors: Sequence[torch.Tensor]) -> int:
    """Size in bytes of ``torch._utils._flatten_dense_tensors(tensors)``.

    Flattening concatenates into one 1-D tensor of the promoted dtype of the
    inputs, so the size is ``total_numel * itemsize(promoted dtype)``.
    """
    if not tensors:
        return 0
    dtype = tensors[0].dtype
    numel = 0
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
        numel += t.numel()
    return numel * _itemsize(dtype)


def split_into_byte_chunks(
    tensors: Sequence[torch.Tensor], budget_bytes: int
) -> List[List[torch.Tensor]]:
    """Split ``tensors`` into consecutive chunks, keeping their order.

    Each chunk's flattened size (see :func:`flattened_nbytes`) is at most
    ``budget_bytes``. A tensor that alone is larger than the budget is put in a
    chunk of its own (a tensor is never split). Concatenating the returned
    chunks gives back ``tensors`` in the original order. An empty input gives an
    empty list.

    Args:
        tensors: the tensors to split (typically gradients).
        budget_bytes: the byte budget of one chunk; must be a positive integer.
    """
    budget_bytes = int(budget_bytes)
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive number of bytes, got {budget_bytes}")

    chunks: List[List[torch.Tensor]] = []
    current: List[torch.Tensor] = []
    cur_dtype: Optional[torch.dtype] = None
    cur_numel = 0
    for t in tensors:
        if current:
            new_dtype = torch.promote_types(cur_dtype, t.dtype)
            new_numel = cur_numel + t.numel()
            if new_numel * _itemsize(new_dtype) <= budget_bytes:
                current.append(t)
                cur_dtype, cur_numel = new_dtype, new_numel
                continue
            chunks.append(current)
        current = [t]
        cur_dtype, cur_numel = t.dtype, t.numel()
    if current:
        chunks.append(current)
    return chunks


def contiguous_region_view(tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """Return one 1-D view covering exactly ``tensors`` if they tile a region.

    The tensors qualify when every non-empty one is contiguous, all share one
    dtype, device and underlying storage, and, ordered by storage offset, each
    starts exactly where the previous one ends (no gap, no overlap). The order
    of ``tensors`` itself does not matter. Writing into the returned view writes
    into the tensors. Returns ``None`` when they do not qualify, or when there
    is nothing to view (all empty).
    """
    live = [t for t in tensors if t.numel() > 0]
    if not live:
        return None
    first = live[0]
    dtype, device = first.dtype, first.device
    try:
        storage_ptr = first.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    for t in live:
        if t.dtype != dtype or t.device != device or not t.is_contiguous():
            return None
        if t.layout != torch.strided or t.is_sparse or t.is_quantized:
            return None
        if t.untyped_storage().data_ptr() != storage_ptr:
            return None
    ordered = sorted(live, key=lambda t: t.storage_offset())
    expected = ordered[0].storage_offset()
    for t in ordered:
        if t.storage_offset() != expected:
            return None
        expected += t.numel()
    start = ordered[0].storage_offset()
    total = expected - start
    return ordered[0].as_strided((total,), (1,), start)
