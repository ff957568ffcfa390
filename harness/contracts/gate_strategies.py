"""The one way the gate defines a composite strategy: registered, and with its errors while drawing told apart.

Every ``@composite`` under ``harness/`` and ``cases/`` goes through :func:`composite` (``tests/unit/test_strategies.py``
checks that none is made another way), so that

- an exception raised while one draws an example is re-raised as a :class:`~harness.formats.generator_error.
  GeneratorError` naming the strategy: the plugin then ends the session with the gate's own status instead of a red
  of the subject, whose code never ran on that example;
- the unit tests find every one of them in :data:`COMPOSITES`, and draw each under random seeds: the examples a
  user's laptop draws (the ``dev`` profile is not derandomized) are drawn by the project's own checks too.

Hypothesis' own control flow (an assumption not met, data that ran out, a frozen draw) passes through untouched.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import errors
from hypothesis import strategies as st

from harness.formats.generator_error import GeneratorError

T = TypeVar("T")

_CONTROL_FLOW = tuple(
    getattr(errors, name)
    for name in ("UnsatisfiedAssumption", "Frozen", "BackendCannotProceed", "ChoiceTooLarge", "RewindRecursive")
    if isinstance(getattr(errors, name, None), type)
)
"""Exceptions hypothesis raises through a draw to steer its own search: never a bug of the strategy."""

COMPOSITES: dict[str, Callable[..., st.SearchStrategy[Any]]] = {}
"""Every composite strategy of the gate, by ``module:qualname``."""
DRAWN: Counter[str] = Counter()
"""How many examples each composite drew in this process: the unit tests check that their draws reached each one."""


def composite(function: Callable[..., T]) -> Callable[..., st.SearchStrategy[T]]:
    """``hypothesis.strategies.composite``, registered in :data:`COMPOSITES`, whose errors while drawing are
    :class:`GeneratorError`\\ s naming it."""
    name = f"{function.__module__}:{function.__qualname__}"

    @functools.wraps(function)
    def guarded(draw: st.DrawFn, *args: Any, **kwargs: Any) -> T:
        DRAWN[name] += 1
        try:
            return function(draw, *args, **kwargs)
        except (GeneratorError, *_CONTROL_FLOW):
            raise
        except Exception as err:
            raise GeneratorError(name, err) from err

    strategy = st.composite(guarded)
    COMPOSITES[name] = strategy
    return strategy
