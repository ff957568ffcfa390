"""Seeded break: reads every chunk as if FSDP were off, so a Megatron-FSDP grad is gathered whole, reduced and
re-sharded into a new object (0.14 on), and a 0.13 FSDP grad is looked for in ``main_grad``/``grad`` instead of
``fsdp_managed_main_grad``."""

from types import SimpleNamespace

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl
from harness.reference import megatron_api as _api


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    flag = _api.fsdp_flag_name()
    configs = [chunk.ddp_config for chunk in model]
    for chunk in model:
        chunk.ddp_config = SimpleNamespace(**{**vars(chunk.ddp_config), flag: False})
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        for chunk, ddp_config in zip(model, configs):
            chunk.ddp_config = ddp_config
