"""Seeded break: reduces over the whole world instead of the tensor-parallel group."""

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    _impl.allreduce_non_tensor_model_parallel_grads(model, config, torch.distributed.group.WORLD)
