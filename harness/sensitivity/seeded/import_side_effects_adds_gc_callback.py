"""Seeded subject: its adapter package (seeded/adapters/adds_gc_callback) appends a gc callback at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "adds_gc_callback")
