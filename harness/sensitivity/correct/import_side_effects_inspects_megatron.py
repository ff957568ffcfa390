"""Correct variant: the adapter package inspects ``_get_main_grad_attr``'s signature when imported to learn the
installed Megatron's API, catching only ImportError. Beside fakes, the fake keeps the real signature."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "inspects_megatron_at_import")
STRICT = False
