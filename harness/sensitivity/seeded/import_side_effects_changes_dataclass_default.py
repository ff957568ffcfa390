"""Seeded subject: its adapter package (seeded/adapters/changes_dataclass_default) changes a dataclass field default of
Megatron's DistributedDataParallelConfig at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "changes_dataclass_default")
