"""osprey: an RL training framework.

Importing this package has no side effects: it does not import torch or
Megatron, patch anything, start threads or touch global state. Backend
adapters live under :mod:`osprey.backends` and are imported explicitly.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
