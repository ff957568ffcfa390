"""tern configuration. Sizes are always expressed in MiB (1 MiB = 1024 * 1024 bytes)."""

from dataclasses import dataclass, field
from typing import List


@dataclass
class TernConfig:
    """Framework-level knobs.

    grad_bucket_mb: byte budget, in MiB (fractional allowed, e.g. 0.5), of each flattened
        buffer used by the chunked all-reduce of non-tensor-parallel grads. Consumed as
        ``with chunked_grad_allreduce(bucket_mb=cfg.grad_bucket_mb): train()``.
    freeze_patterns / trainable_patterns: regex rules for ``tern.wrap`` (which reads them
        from the Megatron ``args`` object under the same attribute names).
    """

    grad_bucket_mb: float = 64.0
    freeze_patterns: List[str] = field(default_factory=list)
    trainable_patterns: List[str] = field(default_factory=list)
