"""heron: a small RL training framework.

The top-level package is deliberately inert: importing it (or any of its
sub-packages' ``__init__``) must not import heavy dependencies, patch third-party
libraries, start processes or touch global state. Backends are imported
explicitly by the code that needs them, e.g. ``heron.backends.megatron``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
