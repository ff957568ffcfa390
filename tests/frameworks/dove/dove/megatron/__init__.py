"""dove's Megatron-Core adapter.

Nothing here patches Megatron at import time; see :mod:`dove.megatron.config_rules`.
"""

from dove.megatron.config_rules import (
    DOVE_FIELD_DEFAULTS,
    DOVE_UNSUPPORTED_FUSIONS,
    DoveConfigRulesError,
    apply_config_rules,
    config_rules_applied,
    enforce_config_rules,
    remove_config_rules,
)

__all__ = [
    "DOVE_FIELD_DEFAULTS",
    "DOVE_UNSUPPORTED_FUSIONS",
    "DoveConfigRulesError",
    "apply_config_rules",
    "config_rules_applied",
    "enforce_config_rules",
    "remove_config_rules",
]
