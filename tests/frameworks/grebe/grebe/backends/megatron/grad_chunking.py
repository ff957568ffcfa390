"""Splitting gradient tensors into byte-budgeted chunks.

Used by ``allreduce_patch`` so that gradients are all-reduced through a series
of bounded flat buffers instead of one buffer holding every gradient.
This module has no side effects and does not import Megatron.
"""

from typing import List, Optional, Sequence

__all__ = ["split_tensors_by_bytes", "tensor_nbytes"]


def tensor_nbytes(tensor, dtype=None) -> int:
    """Bytes ``tensor`` occupies once flattened, as ``dtype`` if given."""
    itemsize = dtype.itemsize if dtype is not None else tensor.element_size()
    return tensor.numel() * itemsize


def split_tensors_by_bytes(
    tensors: Sequence, budget_bytes: int, dtype: Optional[object] = None
) -> List[List]:
    """Split ``tensors`` into consecutive chunks of at most ``budget_bytes``.

    Args:
        tensors: tensors in the order they should be reduced. The order is kept:
            concatenating the returned chunks gives back ``tensors``.
        budget_bytes: the largest flattened size (in bytes) a chunk may have.
            Must be a positive integer.
        dtype: optional ``torch.dtype`` the chunk will be flattened to; when
            given, sizes are counted with its item size instead of each
            tensor's own.

    Returns:
        A list of non-empty lists of tensors (the same tensor objects, not
        copies). Every chunk's total size is ``<= budget_bytes``, except that a
        single tensor larger than the budget forms a chunk of its own.
        Empty input gives ``[]``.
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise TypeError(f"budget_bytes must be an int, got {type(budget_bytes).__name__}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")

    chunks: List[List] = []
    current: List = []
    current_bytes = 0
    for tensor in tensors:
        nbytes = tensor_nbytes(tensor, dtype)
        if current and current_bytes + nbytes > budget_bytes:
            chunks.append(current)
            current = []
            current_bytes = 0
        current.append(tensor)
        current_bytes += nbytes
    if current:
        chunks.append(current)
    return chunks
