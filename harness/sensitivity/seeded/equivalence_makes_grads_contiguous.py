"""Seeded break: makes each grad contiguous before reducing it (``grad.data = grad.contiguous()``). A transposed or
strided grad then gets a new storage: the model's own memory (a view into a larger buffer) never sees the result."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    for chunk in model:
        for param in chunk.parameters():
            for attr in ("main_grad", "grad"):
                grad = getattr(param, attr, None)
                if grad is not None and not grad.is_contiguous():
                    grad.data = grad.contiguous()
    _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
