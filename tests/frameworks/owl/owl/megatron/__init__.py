"""owl's Megatron-Core adapter.

Importing this package does not import Megatron, patch anything, read
environment variables or touch logging.  Patches are applied only by explicit
calls, e.g. :func:`apply_mla_patch`.
"""

from owl.megatron.mla_patch import apply_mla_patch, is_mla_patch_applied, undo_mla_patch

__all__ = ["apply_mla_patch", "undo_mla_patch", "is_mla_patch_applied"]
