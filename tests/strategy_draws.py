"""Drawing the gate's strategies the way a user's laptop does: at random, many examples, nothing saved.

The ``dev`` profile a target session runs outside ``CI=true`` is not derandomized, so every seed a user can draw
must give examples the strategies can build. The draws here use one seed per test run (``--hypothesis-seed`` when
given, else a fresh one, printed in the run's header by ``tests/conftest.py``), so a red replays exactly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

EXAMPLES = 2000
"""Examples drawn from each strategy a test run: the 1-in-1,700 draw that once raised is met more often than not in one
run, and every run draws new ones."""


def draw_at_random(strategy: st.SearchStrategy[Any], run_seed: int, examples: int = EXAMPLES) -> None:
    """Draw ``examples`` examples of ``strategy`` under ``run_seed``, checking nothing but that each could be drawn; an
    error raised while drawing propagates (a composite of the gate raises it as a ``GeneratorError``)."""

    @seed(run_seed)
    @settings(
        max_examples=examples,
        derandomize=False,
        database=None,
        deadline=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def draw(_: Any) -> None:
        pass

    draw()
