"""Capability probes of the installed Megatron: which shape of the private API this install has.

Every probe inspects the installed objects (a signature, a dataclass field, a module attribute) rather than a
version string, so a backport, a fork or a release candidate is handled by what it actually offers.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from types import ModuleType
from typing import Any

FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
FSDP_FLAG_NAMES = ("use_megatron_fsdp", "use_custom_fsdp")


def finalize_module() -> ModuleType:
    """The ``finalize_model_grads`` module itself (the package re-exports a function of the same name)."""
    return importlib.import_module(FINALIZE_MODULE)


def fsdp_flag_name() -> str:
    """The ``DistributedDataParallelConfig`` field upstream's all-reduce reads to decide on FSDP handling."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig

    fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    for name in FSDP_FLAG_NAMES:
        if name in fields:
            return name
    raise RuntimeError(
        f"DistributedDataParallelConfig has none of the FSDP flags {FSDP_FLAG_NAMES}; fields: {sorted(fields)}"
    )


def main_grad_attr_takes_fsdp_flag(module: ModuleType) -> bool:
    """Whether ``_get_main_grad_attr`` takes the FSDP flag as a second argument (0.13/0.14 shape)."""
    return len(inspect.signature(module._get_main_grad_attr).parameters) >= 2


def fsdp_grads_are_local_tensors(flag_name: str) -> bool:
    """Whether, under FSDP, upstream reduces ``grad._local_tensor`` in place (the use_megatron_fsdp shape).

    The older ``use_custom_fsdp`` shape instead reads a separate ``fsdp_managed_main_grad`` attribute and unshards
    it like any other grad.
    """
    return flag_name == "use_megatron_fsdp"


def resolve_tp_group(module: ModuleType, tp_group: Any) -> Any:
    """The tensor-parallel group upstream would use: the given one, else Megatron's current TP group."""
    if tp_group is not None:
        return tp_group
    resolver = getattr(module, "get_tensor_model_parallel_group_if_none", None)
    if resolver is not None:
        return resolver(None)
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group()
