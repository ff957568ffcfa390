"""Seeded adapter: flips the dataclass default of DistributedDataParallelConfig.grad_reduce_in_fp32 at import, so
every config built from the dataclass fields (argument parsers, YAML loaders) gets another default."""

import dataclasses

from megatron.core.distributed import DistributedDataParallelConfig

{field.name: field for field in dataclasses.fields(DistributedDataParallelConfig)}["grad_reduce_in_fp32"].default = True
