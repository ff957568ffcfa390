"""Seeded break: the second collective reduces a copy, so its reduced values never reach the grads."""

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real = torch.distributed.all_reduce
    calls = []

    def losing(tensor, op=torch.distributed.ReduceOp.SUM, group=None, async_op=False):
        calls.append(tensor.numel())
        target = tensor.clone() if len(calls) == 2 else tensor
        return real(target, op=op, group=group, async_op=async_op)

    torch.distributed.all_reduce = losing
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        torch.distributed.all_reduce = real
