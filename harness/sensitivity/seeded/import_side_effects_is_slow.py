"""Seeded subject: its adapter package (seeded/adapters/is_slow) costs more to import than megatron.core."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "is_slow")
