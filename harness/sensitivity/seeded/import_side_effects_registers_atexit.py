"""Seeded subject: its adapter package (seeded/adapters/registers_atexit) registers an atexit hook at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "registers_atexit")
