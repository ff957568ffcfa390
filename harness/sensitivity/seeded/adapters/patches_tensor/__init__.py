"""Seeded adapter: wraps torch.Tensor.register_hook at import."""

import torch

_original = torch.Tensor.register_hook


def _register_hook(self, hook):
    return _original(self, hook)


torch.Tensor.register_hook = _register_hook
