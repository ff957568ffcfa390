"""wdsched: an LLM/RL training framework built on Megatron-Core.

Importing this package has no side effects: it does not import Megatron and
patches nothing. Megatron's weight-decay schedule is only changed by an
explicit call to :func:`wdsched.megatron_patches.apply_patches`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
