"""Seeded break: the subject declares it copied upstream's all-reduce as megatron-core 0.15 shipped it (the body is
the same through 0.19); on 0.13 and 0.14 the installed body is another one, which a copy would not match."""

from harness.reference import *  # noqa: F403

UPSTREAM_BODY_HASHES = {
    "megatron.core.distributed.finalize_model_grads:_allreduce_non_tensor_model_parallel_grads": "c36be900cd564ade",
}
