"""Seeded subject: install() wraps ``DistributedDataParallel.start_grad_sync`` on its class, once, and never puts it
back: nothing it imports changes, every value it computes is upstream's, and only a watch over the class attributes
of Megatron's classes after each case sees it."""

import importlib

from harness.reference import *  # noqa: F403
from harness.reference import install as _install


def install(budget_bytes=None):
    ddp = importlib.import_module("megatron.core.distributed").DistributedDataParallel
    if not getattr(ddp.start_grad_sync, "_seeded", False):
        original = ddp.start_grad_sync

        def start_grad_sync(self, *args, **kwargs):
            return original(self, *args, **kwargs)

        start_grad_sync._seeded = True
        ddp.start_grad_sync = start_grad_sync
    _install(budget_bytes=budget_bytes)
