"""The framework's Megatron adapter: imports its framework by absolute name and its own module relatively."""

from myframework.utils import helper

from .patches import PATCHED

HELPED = helper()

__all__ = ["HELPED", "PATCHED"]
