"""Seeded subject: its adapter package (seeded/adapters/installs_signal_handler) installs a SIGUSR1 handler at
import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "installs_signal_handler")
