"""Seeded adapter: edits Megatron's default tensor-parallel parameter attributes, a module-level dict, in place at
import."""

from megatron.core.tensor_parallel import layers

layers._MODEL_PARALLEL_ATTRIBUTE_DEFAULTS["partition_stride"] = 2
