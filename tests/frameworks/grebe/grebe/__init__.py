"""grebe: an RL training framework.

Importing this package has no side effects: it does not import torch or
Megatron and does not patch anything.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
