"""Seeded break: reads the FSDP flag under the other release's name."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl
from harness.reference import megatron_api as _api


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    real = _api.fsdp_flag_name
    _api.fsdp_flag_name = lambda: "use_custom_fsdp" if real() == "use_megatron_fsdp" else "use_megatron_fsdp"
    try:
        _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
    finally:
        _api.fsdp_flag_name = real
