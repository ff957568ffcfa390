"""Seeded adapter: wraps torch.distributed.ProcessGroup.allreduce at import."""

import torch.distributed

_original = torch.distributed.ProcessGroup.allreduce


def _allreduce(self, *args, **kwargs):
    return _original(self, *args, **kwargs)


torch.distributed.ProcessGroup.allreduce = _allreduce
