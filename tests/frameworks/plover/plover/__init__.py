"""plover: a small RL training framework.

Importing this package has no side effects; backends are imported explicitly,
e.g. ``import plover.backends.megatron``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
