"""Seeded break: the reduced values of the second chunk are never copied back into the grads."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real = _impl._unflatten_dense_tensors
    calls = []

    def unflatten(flat, tensors):
        calls.append(len(tensors))
        return list(tensors) if len(calls) == 2 else real(flat, tensors)

    _impl._unflatten_dense_tensors = unflatten
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        _impl._unflatten_dense_tensors = real
