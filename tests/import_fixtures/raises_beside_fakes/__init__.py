"""Reads the fields of Megatron's DDP config at import: the real config is a dataclass, the fake's stand-in class is
not, so beside the fakes the import raises (a ``TypeError``, no ``ImportError``), and nothing else happens on the
way."""

import dataclasses

from megatron.core.distributed import DistributedDataParallelConfig

FIELDS = tuple(field.name for field in dataclasses.fields(DistributedDataParallelConfig))
