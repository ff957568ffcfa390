"""Seeded break: a selected param whose grad is None is not skipped (the pre-0.14 upstream behaviour)."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl
from harness.reference import megatron_api as _api


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    module = _api.finalize_module()
    flag, flag_in_getter = _api.fsdp_flag_name(), _api.main_grad_attr_takes_fsdp_flag(module)
    local_fsdp_grads = _api.fsdp_grads_are_local_tensors(flag)
    for chunk in model:
        use_fsdp = bool(getattr(chunk.ddp_config, flag))
        for name, param in chunk.named_parameters():
            selected = getattr(param, "average_gradients_across_tp_domain", False) or (
                config.sequence_parallel and getattr(param, "sequence_parallel", False)
            )
            if param.requires_grad and selected:
                getattr(param, _impl._grad_attr(module, param, use_fsdp, flag_in_getter, local_fsdp_grads)).data  # noqa: B018
    _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
