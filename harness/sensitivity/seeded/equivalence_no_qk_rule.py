"""Seeded break: the qk_layernorm selection rule is dropped."""

import copy

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    without_qk = copy.copy(config)
    without_qk.qk_layernorm = False
    _impl.allreduce_non_tensor_model_parallel_grads(model, without_qk, tp_group)
