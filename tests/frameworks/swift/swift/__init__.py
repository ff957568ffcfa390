"""swift: a small LLM/RL training framework on top of Megatron-Core.

Importing this package (or ``swift.megatron``) has no side effects: nothing in
Megatron is patched until an explicit ``instrument_model`` call.
"""

__version__ = "0.1.0"
