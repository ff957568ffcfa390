"""dove: an LLM/RL training framework built on Megatron-Core.

Importing ``dove`` (or ``dove.megatron``) has no side effects: Megatron is only
patched by an explicit call such as ``dove.megatron.apply_config_rules()``.
"""

__version__ = "0.1.0"
