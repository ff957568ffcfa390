"""Seeded subject: its adapter package (seeded/adapters/mutates_megatron_dict) changes a Megatron module-level dict in
place at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "mutates_megatron_dict")
