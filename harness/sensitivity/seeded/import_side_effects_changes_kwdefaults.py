"""Seeded subject: its adapter package (seeded/adapters/changes_kwdefaults) changes a keyword-only default of Megatron's
log_single_rank at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "changes_kwdefaults")
