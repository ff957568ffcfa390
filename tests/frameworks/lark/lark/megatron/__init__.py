"""lark's Megatron-Core adapter.

Patches are applied only by explicit calls; importing this subpackage has no
side effects on Megatron (Megatron itself is imported lazily at apply time).
"""

from lark.megatron.router_jitter import (
    disable_router_jitter,
    enable_router_jitter,
    get_router_jitter_eps,
    is_router_jitter_enabled,
)

__all__ = [
    "enable_router_jitter",
    "disable_router_jitter",
    "is_router_jitter_enabled",
    "get_router_jitter_eps",
]
