"""Seeded subject: its module body re-binds Megatron's ``_allreduce_non_tensor_model_parallel_grads`` (and the alias)
to its own all-reduce at import, no ``install()`` needed, and that all-reduce sums the AVG bucket. The replacement is
wrapped with ``functools.wraps`` (as adapters often are), so it carries upstream's name, module and source: a gate
that reads "upstream" from the module attribute after loading the subject compares this function with itself."""

import functools
import importlib

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl

_module = importlib.import_module("megatron.core.distributed.finalize_model_grads")


@functools.wraps(_module._allreduce_non_tensor_model_parallel_grads)
def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real = torch.distributed.all_reduce

    def summing(tensor, op=None, group=None, async_op=False):
        return real(tensor, op=torch.distributed.ReduceOp.SUM, group=group, async_op=async_op)

    torch.distributed.all_reduce = summing
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        torch.distributed.all_reduce = real


for _name in ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads"):
    if hasattr(_module, _name):
        setattr(_module, _name, allreduce_non_tensor_model_parallel_grads)
