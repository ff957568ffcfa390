"""Megatron-Core adapter for swift.

Public API (see NOTES.md):

* :func:`instrument_model` / :func:`restore_model` - per-instance ``forward``
  swap on every ``TransformerLayer`` of a built model, recording the mean
  absolute value of each layer's output hidden states.
* :data:`ACTIVATION_STATS`, :func:`get_activation_stats`,
  :func:`clear_activation_stats` - the swift-owned stats dict.
"""

from .activation_stats import (
    ACTIVATION_STATS,
    clear_activation_stats,
    get_activation_stats,
    instrument_model,
    is_instrumented,
    restore_model,
)

__all__ = [
    "ACTIVATION_STATS",
    "clear_activation_stats",
    "get_activation_stats",
    "instrument_model",
    "is_instrumented",
    "restore_model",
]
