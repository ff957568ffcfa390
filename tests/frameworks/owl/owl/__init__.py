"""owl: an LLM/RL training framework built on Megatron-Core.

Importing this package has no side effects.  The Megatron adapter lives in
``owl.megatron``.
"""

__version__ = "0.1.0"
