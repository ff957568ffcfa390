"""Seeded subject: its adapter package (seeded/adapters/sets_trace) installs a trace function with sys.settrace at
import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "sets_trace")
