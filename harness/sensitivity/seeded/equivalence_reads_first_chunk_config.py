"""Seeded break: reads the first model chunk's ``ddp_config`` for every chunk, so a later chunk with FSDP on has its
grads read as if FSDP were off (each chunk carries its own config, and upstream reads each one's)."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    configs = [chunk.ddp_config for chunk in model]
    for chunk in model:
        chunk.ddp_config = configs[0]
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        for chunk, ddp_config in zip(model, configs):
            chunk.ddp_config = ddp_config
