"""Seeded break: reduces the region from a chunk's lowest to its highest grad in one view whenever the grads share a
storage, gaps included, so a grad lying between them in the grad buffer (not selected, or reduced with the other
op) is reduced too."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl
from harness.reference.chunks import tensor_bytes


def _region(chunk_grads, dtype):
    present = sorted((g for g in chunk_grads if g.numel()), key=lambda g: g.data_ptr())
    if len(present) < 2 or any(g.dtype != dtype or not g.is_contiguous() for g in present):
        return _exact(chunk_grads, dtype)
    if len({g.untyped_storage().data_ptr() for g in present}) != 1:
        return _exact(chunk_grads, dtype)
    first, last = present[0], present[-1]
    numel = (last.data_ptr() + tensor_bytes(last) - first.data_ptr()) // first.element_size()
    return first.as_strided((numel,), (1,), first.storage_offset())


_exact = _impl._in_place_target


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    _impl._in_place_target = _region
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        _impl._in_place_target = _exact
