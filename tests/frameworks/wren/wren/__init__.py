"""wren: a small RL training framework.

This top-level package intentionally imports nothing heavy. Backends live in
``wren.backends`` and are imported explicitly by the code that needs them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
