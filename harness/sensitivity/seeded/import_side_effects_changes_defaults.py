"""Seeded subject: its adapter package (seeded/adapters/changes_defaults) changes the default arguments of Megatron's
finalize_model_grads at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "changes_defaults")
