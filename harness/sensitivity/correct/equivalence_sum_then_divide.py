"""Correct variant: where upstream averages, a SUM all-reduce followed by a division by the group's size. The values
equal upstream's (bitwise on two-rank groups, within the float64 bound on four); the op differs, which is an
advisory, never a red."""

from typing import Any

import torch

from harness.reference import *  # noqa: F403
from harness.sensitivity.correct.variant import installer, reference_allreduce_with

_SUM = torch.distributed.ReduceOp.SUM


class _DividedOnWait:
    """An async handle whose ``wait`` also divides the summed tensor."""

    def __init__(self, work: Any, tensor: torch.Tensor, size: int) -> None:
        self.work, self.tensor, self.size = work, tensor, size

    def wait(self) -> bool:
        self.work.wait()
        self.tensor.div_(self.size)
        return True


def _all_reduce(tensor: torch.Tensor, op: Any = _SUM, group: Any = None, async_op: bool = False) -> Any:
    if op != torch.distributed.ReduceOp.AVG:
        return torch.distributed.all_reduce(tensor, op=op, group=group, async_op=async_op)
    size = torch.distributed.get_world_size(group)
    work = torch.distributed.all_reduce(tensor, op=_SUM, group=group, async_op=async_op)
    if async_op:
        return _DividedOnWait(work, tensor, size)
    tensor.div_(size)
    return work


allreduce_non_tensor_model_parallel_grads = reference_allreduce_with(
    _all_reduce
).allreduce_non_tensor_model_parallel_grads
install = installer(allreduce_non_tensor_model_parallel_grads)
STRICT = False
