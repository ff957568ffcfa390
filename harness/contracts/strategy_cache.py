"""Strategies built once and drawn from in every example.

Hypothesis validates a strategy object on its first draw; a ``sampled_from`` built inside a composite's draw is a new
object every example, validated every time (a quarter of what drawing a population cost, half of a provider). The
same strategy, built once, draws the same values from the same choices, so caching one changes no example.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st


@functools.cache
def sampled(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """``st.sampled_from(values)``, one strategy object per tuple of values."""
    return st.sampled_from(values)
