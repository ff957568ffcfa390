"""kestrel: an RL training framework.

This top-level package is intentionally import-light: importing it does not
import torch or Megatron, and does not patch, start or configure anything.
Backends live under :mod:`kestrel.backends`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
