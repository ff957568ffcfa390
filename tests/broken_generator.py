"""A seeded bug of the gate's own example generator, loaded into a target session with ``-p tests.broken_generator``:
the chunk-splitting family's budgets are drawn from an interval that is empty for most populations, as
``budgets_for_population`` once was for a population of empty grads. The session must end with the gate's own
status and line, never with a red of the subject, which never ran on such an example."""

from __future__ import annotations

from hypothesis import strategies as st

from harness.contracts import population_strategies
from harness.contracts.gate_strategies import composite


@composite
def budgets_from_an_empty_interval(draw: st.DrawFn, specs: list) -> int:
    total = sum(spec.nbytes() for spec in specs)
    return draw(st.integers(total + 1, total))


population_strategies.budgets_for = budgets_from_an_empty_interval
