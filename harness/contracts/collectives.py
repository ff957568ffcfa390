"""All-reduces recorded where they run: at the dispatcher, as the ``c10d`` and functional-collective ops.

A subject reaches gloo or NCCL by many paths: ``torch.distributed.all_reduce`` looked up at call time, the same
function bound under another name at import (``from torch.distributed import all_reduce``), ``all_reduce_coalesced``,
a process group's own ``allreduce`` method, ``torch.distributed._functional_collectives``, with or without
``async_op``. Every one of them becomes one of the ops below before any backend runs, so a ``TorchDispatchMode`` sees
them all, and wrapping a Python attribute (which a name bound at import never looks up again) sees only one path.
A subject cannot bypass it short of calling a backend object (``ProcessGroupGloo``) directly, which no Megatron
adapter does; it cannot false-alarm either, since only ops that really run are recorded.

Each record is ``(op, bytes, element size)``: the reduce op's name (``SUM``, ``AVG``, ...), the bytes of the one
message (for a coalesced op, every tensor it was given together) and the widest element among them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# c10d ops: (tensors, process group, ReduceOp script object, ...).
_C10D_ALL_REDUCES = {"allreduce_", "allreduce_coalesced_"}
# Functional collectives: (tensor or tensors, reduce op name, group name).
_FUNCTIONAL_ALL_REDUCES = {"all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_"}


def _op_name(script_op: Any) -> str:
    """The name of a boxed ``ReduceOp`` (its ``op`` method answers the ``RedOpType`` value)."""
    return torch.distributed.ReduceOp.RedOpType(script_op._get_method("op")()).name


def message_bytes(tensors: list[torch.Tensor]) -> int:
    """The bytes one collective sends: every tensor's elements times their size (a meta tensor has no storage)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _group_name(group: Any) -> str:
    return group.group_name


class CollectiveRecorder(TorchDispatchMode):
    """Records every all-reduce run inside the block, and counts those on a group other than ``tp_group``."""

    def __init__(self, tp_group: Any) -> None:
        super().__init__()
        self.tp_group_name = _group_name(tp_group)
        self.calls: list[tuple[str, int, int]] = []
        self.foreign_groups = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        namespace, name = func.namespace, func._opname
        if namespace == "c10d" and name in _C10D_ALL_REDUCES:
            group = torch.distributed.ProcessGroup.unbox(args[1])
            self._record(list(args[0]), _op_name(args[2]), _group_name(group))
        elif namespace == "_c10d_functional" and name in _FUNCTIONAL_ALL_REDUCES:
            tensors = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
            self._record(list(tensors), str(args[1]).upper(), str(args[2]))
        return func(*args, **kwargs)

    def _record(self, tensors: list[torch.Tensor], op: str, group_name: str) -> None:
        if group_name != self.tp_group_name:
            self.foreign_groups += 1
        size = message_bytes(tensors)
        element = max((t.element_size() for t in tensors), default=1)
        self.calls.append((op, size, element))
