"""Seeded break: the replacement keeps the 0.13 signature ``(model, config)``; 0.14+ callers pass ``tp_group``."""

from harness.reference import *  # noqa: F403
from harness.reference import allreduce_non_tensor_model_parallel_grads as _chunked


def allreduce_non_tensor_model_parallel_grads(model, config):
    _chunked(model, config)
