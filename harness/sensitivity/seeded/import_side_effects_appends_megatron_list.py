"""Seeded subject: its adapter package (seeded/adapters/appends_megatron_list) appends to a Megatron module-level list
in place at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "appends_megatron_list")
