"""Seeded subject: its adapter package (seeded/adapters/sets_thread_trace) installs a trace function for new threads
with threading.settrace at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "sets_thread_trace")
