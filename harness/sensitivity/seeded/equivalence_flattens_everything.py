"""Seeded subject: flattens all of an op's grads into one buffer, as upstream does, then all-reduces budget-sized
views of it. Every collective message stays within the budget and the values are upstream's; only the memory is
not bounded: the buffer holds every grad of the op at once."""

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl
from harness.reference.budget import current_budget


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real_all_reduce, real_pack, real_target = torch.distributed.all_reduce, _impl._pack, _impl._in_place_target

    def one_chunk(params, grads, dtype, budget):
        return [(list(params), list(grads))]

    def in_views(tensor, op=torch.distributed.ReduceOp.SUM, group=None, async_op=False):
        if async_op:
            return real_all_reduce(tensor, op=op, group=group, async_op=True)
        flat = tensor.view(-1)
        step = max(1, current_budget() // flat.element_size())
        for start in range(0, flat.numel(), step):
            real_all_reduce(flat[start : start + step], op=op, group=group)
        return None

    # Every grad goes through the flattened buffer, even grads a view of their grad buffer could reduce in place.
    _impl._pack, _impl._in_place_target, torch.distributed.all_reduce = one_chunk, lambda grads, dtype: None, in_views
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        _impl._pack, _impl._in_place_target, torch.distributed.all_reduce = real_pack, real_target, real_all_reduce
