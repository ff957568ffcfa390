"""Seeded subject: its adapter package (seeded/adapters/patches_tensor) re-binds a method of torch.Tensor at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "patches_tensor")
