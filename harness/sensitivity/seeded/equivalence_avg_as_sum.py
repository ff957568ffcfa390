"""Seeded break: the AVG bucket is all-reduced with SUM."""

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real = torch.distributed.all_reduce

    def summing(tensor, op=None, group=None, async_op=False):
        return real(tensor, op=torch.distributed.ReduceOp.SUM, group=group, async_op=async_op)

    torch.distributed.all_reduce = summing
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        torch.distributed.all_reduce = real
