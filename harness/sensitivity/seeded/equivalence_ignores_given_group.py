"""Seeded break: ignores the ``tp_group`` its caller passes and reduces over parallel_state's TP group instead
(from 0.14 on ``finalize_model_grads`` passes the group it wants, which need not be parallel_state's)."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    _impl.allreduce_non_tensor_model_parallel_grads(model, config)
