"""lark: an LLM/RL training framework built on Megatron-Core.

Importing this package (or ``lark.megatron``) never patches Megatron, never
imports Megatron, reads no environment variables and configures no logging.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
