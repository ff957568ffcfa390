"""Seeded subject: its adapter package (seeded/adapters/patches_process_group) re-binds a method of
torch.distributed.ProcessGroup at import."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "patches_process_group")
