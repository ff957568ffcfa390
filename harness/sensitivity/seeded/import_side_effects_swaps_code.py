"""Seeded subject: its adapter package (seeded/adapters/swaps_code) swaps the code of Megatron's finalize_model_grads in
place at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "swaps_code")
