"""Every strategy the cases draw examples from, drawn as a user's laptop draws them: at random, thousands of examples,
under this run's seed (printed in the header; ``--hypothesis-seed N`` replays it). A strategy that can raise on
some seed (an interval that comes out empty) is a gate that goes red on a right subject; here it is a red of the
project's own tests, and a seeded one proves the draws find it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from harness import REPO_ROOT
from harness.contracts import gate_strategies, model_provider, population_strategies
from harness.contracts.gate_strategies import COMPOSITES, DRAWN, composite
from harness.contracts.population_strategies import (
    FSDP_ORDERS,
    budgets_for_population,
    equivalence_examples,
    split_examples,
)
from harness.contracts.populations import GAPPED, GROUPS, LAYOUTS, FakeParameter, Population
from harness.formats.generator_error import GATE_ERROR_STATUS, NOT_A_VERDICT, PREFIX, GeneratorError
from tests.strategy_draws import draw_at_random

_PROVIDER_KEYWORDS = ("vp_stage", "config", "pg_collection")
_CALLER_KEYWORDS = ("pre_process", "vp_stage", "config")
CASE_DRAWS: dict[str, Any] = {
    "split": lambda: split_examples(),
    **{
        f"equivalence-{fsdp}": (lambda fsdp=fsdp: equivalence_examples(groups=tuple(GROUPS), fsdp=fsdp))
        for fsdp in FSDP_ORDERS
    },
    "equivalence-gapped": lambda: equivalence_examples(layouts=(*LAYOUTS, GAPPED)),
    "provider": lambda: model_provider.provider_specs(positional_only=False),
    "provider-positional-only": lambda: model_provider.provider_specs(positional_only=True),
    "provider-failing": lambda: model_provider.provider_specs(failing=True, positional_only=False),
    **{
        f"provider-promised-{(failing and 'failing') or 'returning'}-kwargs-{kwargs}": (
            lambda failing=failing, kwargs=kwargs: model_provider.provider_specs(
                failing=failing, positional_only=False, var_keyword=kwargs, names=_PROVIDER_KEYWORDS
            )
        )
        for failing in (False, True)
        for kwargs in (None, False)
    },
    "freeze-patterns": model_provider.freeze_patterns,
    "caller-values": lambda: st.tuples(*(model_provider.caller_value(k) for k in _CALLER_KEYWORDS)),
}
"""Each strategy a case draws from, with every argument the cases give it (a composite's arguments change which
intervals it builds)."""


def _composite_definitions(root: Path) -> list[tuple[str, str]]:
    """``(file:line, how)`` of every composite strategy defined under ``root``, and how it was made."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                if text.split("(")[0].rsplit(".", 1)[-1] == "composite":
                    found.append((f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}", text))
    return found


def test_every_composite_is_made_through_the_gate() -> None:
    """``hypothesis.strategies.composite`` used directly would draw outside the registry and outside the guard that
    tells the gate's errors from the subject's."""
    definitions = [d for root in ("harness", "cases") for d in _composite_definitions(REPO_ROOT / root)]
    assert definitions, "no composite strategy found: the scan is broken"
    elsewhere = [where for where, how in definitions if how != "composite"]
    assert elsewhere == [], f"composites not made with harness.contracts.gate_strategies.composite: {elsewhere}"
    assert len(definitions) == len(_gate_composites()), (sorted(_gate_composites()), definitions)


def _gate_composites() -> list[str]:
    """The registered composites of the gate itself (this module registers seeded ones of its own)."""
    return [name for name in COMPOSITES if name.startswith(("harness.", "cases."))]


@pytest.mark.parametrize("name", sorted(CASE_DRAWS))
def test_a_strategy_draws_thousands_of_random_examples_without_raising(name: str, run_seed: int) -> None:
    draw_at_random(CASE_DRAWS[name](), run_seed)


def test_the_draws_reach_every_composite(run_seed: int) -> None:
    DRAWN.clear()
    for make in CASE_DRAWS.values():
        draw_at_random(make(), run_seed, examples=50)
    assert sorted(name for name in _gate_composites() if not DRAWN[name]) == []


@composite
def _budget_from_an_interval_that_can_be_empty(draw: st.DrawFn) -> int:
    """A seeded strategy bug: the lower end is drawn, the upper one fixed, and one draw in three finds no integer."""
    low = draw(st.integers(0, 15))
    return draw(st.integers(low, 10))


def test_a_seeded_strategy_bug_turns_the_draws_red(run_seed: int) -> None:
    with pytest.raises(GeneratorError) as caught:
        draw_at_random(_budget_from_an_interval_that_can_be_empty(), run_seed)
    line = str(caught.value)
    assert line.startswith(PREFIX) and line.endswith(NOT_A_VERDICT)
    assert f"{__name__}:_budget_from_an_interval_that_can_be_empty raised InvalidArgument" in line


@composite
def _odd_numbers(draw: st.DrawFn) -> int:
    value = draw(st.integers(0, 100))
    assume(value % 2)
    return value


def test_hypothesis_control_flow_passes_through_the_guard(run_seed: int) -> None:
    """An assumption a composite rejects is hypothesis steering its search, not an error of the strategy."""
    drawn = []
    draw_at_random(st.builds(drawn.append, _odd_numbers()), run_seed, examples=100)
    assert drawn and all(value % 2 for value in drawn)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_population_of_empty_grads_still_has_budgets(dtype: str, count: int, run_seed: int) -> None:
    """The draw that raised on a user's machine: grads with no elements have fewer bytes all told than one element of
    their coalesced dtype, the smallest budget drawn; every budget is at least that element."""
    specs = tuple(FakeParameter(f"decoder.layers.{i}.input_layernorm.weight", 0, dtype, "grad") for i in range(count))
    population = Population(chunks=(specs,), sequence_parallel=True, qk_layernorm=False, seed=1)
    element = torch.empty((), dtype=population_strategies.DTYPES[dtype]).element_size()
    budgets = []
    draw_at_random(st.builds(budgets.append, budgets_for_population(population)), run_seed, examples=200)
    assert budgets and min(budgets) >= element


def test_the_gates_own_status_is_no_verdicts() -> None:
    assert GATE_ERROR_STATUS not in (0, 1, 2, 3, 4, 5)
    assert gate_strategies.GeneratorError is GeneratorError
