"""Seeded break: a selected param whose grad is None is not skipped (the pre-0.14 upstream behaviour)."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    for chunk in model:
        for name, param in chunk.named_parameters():
            selected = getattr(param, "average_gradients_across_tp_domain", False) or (
                config.sequence_parallel and getattr(param, "sequence_parallel", False)
            )
            if param.requires_grad and selected:
                grad = param.main_grad if hasattr(param, "main_grad") else param.grad
                grad.data  # noqa: B018
    _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
