"""Seeded adapter: re-binds Megatron's all-reduce the moment it is imported."""

import importlib

_module = importlib.import_module("megatron.core.distributed.finalize_model_grads")
_module._allreduce_layernorm_grads = lambda model, config, tp_group=None: None
