"""Seeded subject: its adapter package (seeded/adapters/arms_timer) arms a real-time interval timer, e.g. one that
patches later at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "arms_timer")
