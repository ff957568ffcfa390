"""Seeded subject: its adapter package (seeded/adapters/starts_thread) has a side effect at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "starts_thread")
