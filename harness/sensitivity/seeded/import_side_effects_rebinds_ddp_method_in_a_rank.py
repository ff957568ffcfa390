"""Seeded subject: the replacement, where it runs (inside the rank processes), wraps
``DistributedDataParallel.start_grad_sync`` on its class on its first call and never puts it back. The gate's own
process never calls it with a real group, so only a watch inside the ranks sees the change."""

import importlib

import torch

from harness.reference import *  # noqa: F403
from harness.reference import allreduce as _impl


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        ddp = importlib.import_module("megatron.core.distributed").DistributedDataParallel
        if not getattr(ddp.start_grad_sync, "_seeded", False):
            original = ddp.start_grad_sync

            def start_grad_sync(self, *args, **kwargs):
                return original(self, *args, **kwargs)

            start_grad_sync._seeded = True
            ddp.start_grad_sync = start_grad_sync
    return _impl.allreduce_non_tensor_model_parallel_grads(model, config, tp_group)
