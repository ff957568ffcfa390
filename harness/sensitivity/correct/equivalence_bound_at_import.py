"""Correct variant: ``all_reduce`` bound at import (``from torch.distributed import all_reduce``) and called by that
name. How an adapter reaches the collective is its own business; the values and the group are what count."""

from torch.distributed import all_reduce

from harness.reference import *  # noqa: F403
from harness.sensitivity.correct.variant import installer, reference_allreduce_with

allreduce_non_tensor_model_parallel_grads = reference_allreduce_with(
    all_reduce
).allreduce_non_tensor_model_parallel_grads
install = installer(allreduce_non_tensor_model_parallel_grads)
STRICT = False
