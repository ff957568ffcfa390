"""Seeded subject: its adapter package (seeded/adapters/logs) has a side effect at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "logs")
