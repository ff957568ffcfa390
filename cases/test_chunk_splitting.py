"""Contract: chunk splitting. Properties of the subject's ``split_into_chunks`` on generated grad populations.

Each property names itself in its failure message, so a red says which promise broke: partition, alignment,
budget, no-empty, greedy tightness, element-size accounting, budget validation or linear cost (measured in bytecode
instructions and bytes allocated, not in time or calls).

Order, greedy tightness, budget validation, no empty chunk and linear cost are advisory (``@pytest.mark.advisory``):
an adapter that groups grads by dtype before chunking, makes more collectives than needed, treats a budget of 0 as
"one tensor per chunk", leaves an empty chunk or splits in quadratic time still gives Megatron every value it
computes. They are reported in their own colour, and are reds only for a strict subject (a module subject, or a
declaration with ``strict = true``).
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType

import pytest
import torch
from hypothesis import given

from harness.contracts.population_strategies import TensorSpec, gpt_layer_specs, split_examples
from harness.contracts.work import Work, measure_work, settled_heap
from harness.formats.budget_units import budget_words, effective_budget
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.targets.matrix import Target

FAMILY = family("chunk-splitting")
pytestmark = FAMILY.mark()


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def materialise(specs: list[TensorSpec]) -> tuple[list[torch.nn.Parameter], list[torch.Tensor]]:
    grads = [spec.empty() for spec in specs]
    params = [torch.nn.Parameter(torch.empty(0)) for _ in specs]
    return params, grads


def split(subject: ModuleType, params: list, grads: list, budget: int) -> list[tuple[list, list]]:
    chunks = [(list(p), list(g)) for p, g in subject.split_into_chunks(params, grads, budget)]
    return chunks


@given(split_examples())
def test_partition(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    """Every grad exactly once, each with its own param: what ``finalize_model_grads`` reduces. In what order the
    chunks hold them changes no value a rank computes, so order is an advisory of its own (:func:`test_order`)."""
    specs, budget = case
    params, grads = materialise(specs)
    chunks = split(subject, params, grads, budget)
    flat_params = [p for chunk_params, _ in chunks for p in chunk_params]
    flat_grads = [g for _, chunk_grads in chunks for g in chunk_grads]
    times = Counter(id(g) for g in flat_grads)
    param_of = {id(g): p for p, g in zip(params, grads, strict=True)}
    wrong = [g for g in grads if times[id(g)] != 1]
    strangers = [g for g in flat_grads if id(g) not in param_of]
    unpaired = len(flat_params) != len(flat_grads) or any(
        param_of.get(id(g)) is not p for p, g in zip(flat_params, flat_grads, strict=False)
    )
    assert not (wrong or strangers or unpaired), contract_failure(
        target,
        FAMILY.name,
        f"property 'partition' violated by {FAMILY.symbol}",
        f"the chunks do not hold every grad exactly once, each with its own param (input {len(grads)} tensors, "
        f"chunks hold {len(flat_grads)} grads / {len(flat_params)} params: {len(wrong)} grads not exactly once, "
        f"{len(strangers)} tensors that are not input grads, params {'not ' if unpaired else ''}paired; "
        f"{budget_words(subject, budget)})",
    )


@pytest.mark.advisory
@given(split_examples())
def test_order(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    """The chunks concatenated are the input in its order: what upstream's one buffer holds. Another order reduces
    the same values, so this is an advisory (a splitter that groups grads by dtype first is correct)."""
    specs, budget = case
    params, grads = materialise(specs)
    flat_grads = [g for _, chunk_grads in split(subject, params, grads, budget) for g in chunk_grads]
    same = len(flat_grads) == len(grads) and all(a is b for a, b in zip(flat_grads, grads, strict=True))
    assert same, contract_failure(
        target,
        FAMILY.name,
        f"property 'order' violated by {FAMILY.symbol}",
        f"the chunks concatenated are not the input sequence (input {len(grads)} tensors; "
        f"{budget_words(subject, budget)})",
    )


@given(split_examples())
def test_alignment(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    specs, budget = case
    params, grads = materialise(specs)
    grad_of = {id(p): g for p, g in zip(params, grads, strict=True)}
    for index, (chunk_params, chunk_grads) in enumerate(split(subject, params, grads, budget)):
        assert len(chunk_params) == len(chunk_grads), contract_failure(
            target,
            FAMILY.name,
            f"property 'alignment' violated by {FAMILY.symbol}",
            f"chunk {index} holds {len(chunk_params)} params but {len(chunk_grads)} grads",
        )
        for position, (param, grad) in enumerate(zip(chunk_params, chunk_grads, strict=False)):
            assert grad_of.get(id(param)) is grad, contract_failure(
                target,
                FAMILY.name,
                f"property 'alignment' violated by {FAMILY.symbol}",
                f"chunk {index} position {position}: the grad is not the grad of its param",
            )


@given(split_examples())
def test_budget_and_oversize_alone(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    specs, budget = case
    params, grads = materialise(specs)
    limit, words = effective_budget(subject, budget), budget_words(subject, budget)
    for index, (_, chunk_grads) in enumerate(split(subject, params, grads, budget)):
        oversize = [nbytes(g) for g in chunk_grads if nbytes(g) > limit]
        assert not oversize or len(chunk_grads) == 1, contract_failure(
            target,
            FAMILY.name,
            f"property 'oversize alone' violated by {FAMILY.symbol}",
            f"chunk {index} mixes a {oversize[0]}-byte grad (> {words}) with others",
        )
        size = sum(nbytes(g) for g in chunk_grads)
        assert len(chunk_grads) == 1 or size <= limit, contract_failure(
            target,
            FAMILY.name,
            f"property 'budget' violated by {FAMILY.symbol}",
            f"chunk {index} of {len(chunk_grads)} grads holds {size} bytes > {words}",
        )


@pytest.mark.advisory
@given(split_examples())
def test_no_empty_chunks(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    specs, budget = case
    params, grads = materialise(specs)
    chunks = split(subject, params, grads, budget)
    empty = [i for i, (p, g) in enumerate(chunks) if not p or not g]
    assert not empty, contract_failure(
        target,
        FAMILY.name,
        f"property 'no empty chunk' violated by {FAMILY.symbol}",
        f"chunks {empty} are empty (budget {budget})",
    )
    if not specs:
        assert chunks == [], contract_failure(
            target,
            FAMILY.name,
            f"property 'no empty chunk' violated by {FAMILY.symbol}",
            f"empty input gave {len(chunks)} chunks",
        )


@pytest.mark.advisory
@given(split_examples())
def test_greedy_tightness(subject: ModuleType, target: Target, case: tuple[list[TensorSpec], int]) -> None:
    specs, budget = case
    params, grads = materialise(specs)
    chunks = split(subject, params, grads, budget)
    limit = effective_budget(subject, budget)
    for index in range(len(chunks) - 1):
        size = sum(nbytes(g) for g in chunks[index][1])
        following = nbytes(chunks[index + 1][1][0]) if chunks[index + 1][1] else 0
        if size <= limit:
            assert size + following > limit, contract_failure(
                target,
                FAMILY.name,
                f"property 'greedy tightness' violated by {FAMILY.symbol}",
                f"chunk {index} ({size} bytes) could have taken the next grad ({following} bytes) within "
                f"{budget_words(subject, budget)}: {len(chunks)} collectives where fewer suffice",
            )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bytes_use_element_size(subject: ModuleType, target: Target, dtype: torch.dtype) -> None:
    element = torch.empty((), dtype=dtype).element_size()
    # Two grads per chunk exactly: 12 elements each, or, for a framework that takes whole units of its budget only
    # (a MiB), grads of half the smallest budget it can be given.
    columns = max(3, effective_budget(subject, 1) // (2 * 4 * element))
    specs = [TensorSpec(f"t{i}", (4, columns), dtype, transposed=i % 2 == 1) for i in range(6)]
    params, grads = materialise(specs)
    budget = 2 * 4 * columns * element
    sizes = [len(g) for _, g in split(subject, params, grads, budget)]
    assert sizes == [2, 2, 2], contract_failure(
        target,
        FAMILY.name,
        f"property 'element-size bytes' violated by {FAMILY.symbol}",
        f"six {dtype} grads of {4 * columns} elements ({4 * columns * element} bytes each) under a {budget}-byte "
        f"budget must form chunks of 2, got chunk sizes {sizes}",
    )


@pytest.mark.advisory
@pytest.mark.parametrize("budget", [0, -1, 1.5, "64", None, True])
def test_invalid_budget_is_a_value_error(subject: ModuleType, target: Target, budget: object) -> None:
    params, grads = materialise([TensorSpec("t", (2,), torch.float32)])
    try:
        subject.split_into_chunks(params, grads, budget)
    except ValueError:
        return
    except Exception as err:
        pytest.fail(
            contract_failure(
                target,
                FAMILY.name,
                f"property 'budget validation' violated by {FAMILY.symbol}",
                f"budget {budget!r} raised {err!r}, not ValueError",
            )
        )
    pytest.fail(
        contract_failure(
            target,
            FAMILY.name,
            f"property 'budget validation' violated by {FAMILY.symbol}",
            f"budget {budget!r} was accepted silently",
        )
    )


# Linear cost: the splitter's work on COST_GROWTH times as many grads, against its work on the small population,
# counted by harness.contracts.work in bytecode instructions and in bytes allocated (never in wall time). A linear
# splitter does COST_GROWTH times the work, a little less with its fixed costs; COST_SLACK covers those and list
# over-allocation (a list of n items holds up to 1.125n + 6 slots). A quadratic splitter does up to 64x.
COST_GROWTH = 8
COST_SLACK = 1.5
_WARM_UPS = 2
"""Traced runs discarded before measuring: the first traced runs specialise code and fill caches (on 3.12 the very
first one counts no instructions at all); from then on the counts repeat exactly."""


def _cost_inputs(count: int, budget: int | None) -> tuple[list, list, int]:
    specs = gpt_layer_specs(num_layers=count // 8 + 1, hidden=4, dtype=torch.float32)[:count]
    params, grads = materialise(specs)
    return params, grads, budget or sum(nbytes(g) for g in grads)


def _work(subject: ModuleType, inputs: tuple[list, list, int], instruction_limit: int | None = None) -> Work:
    return measure_work(lambda: subject.split_into_chunks(*inputs), instruction_limit)


def _growth(name: str, few: int, many: int, bound: float) -> tuple[bool, str]:
    """Whether one measure grew past ``bound``, and its line of the linear-cost message."""
    ratio = many / max(few, 1)
    return (
        ratio > bound,
        f"{name}: {ratio:.1f}x ({few:,} -> {many:,}), {'over the bound' if ratio > bound else 'within it'}",
    )


@pytest.mark.advisory
@pytest.mark.parametrize(("small", "budget"), [(400, 64), (100, None)], ids=["many-short-chunks", "one-long-chunk"])
def test_cost_is_linear_in_tensor_count(subject: ModuleType, target: Target, small: int, budget: int | None) -> None:
    few_inputs, many_inputs = _cost_inputs(small, budget), _cost_inputs(COST_GROWTH * small, budget)
    bound = COST_GROWTH * COST_SLACK
    with settled_heap():
        for _ in range(_WARM_UPS):
            _work(subject, few_inputs)
        few = _work(subject, few_inputs)
        # Past the bound the answer is known: counting stops there and the rest of the call runs untraced.
        limit = int(bound * few.instructions)
        many = _work(subject, many_inputs, instruction_limit=limit)
    if many.complete:
        measures = [
            _growth("bytecode instructions executed", few.instructions, many.instructions, bound),
            _growth("bytes allocated", few.allocated_bytes, many.allocated_bytes, bound),
        ]
        over, lines = any(broke for broke, _ in measures), [line for _, line in measures]
    else:
        over = True
        lines = [
            f"bytecode instructions executed: more than {bound:g}x ({few.instructions:,} -> more than {limit:,}, "
            "where counting stopped), over the bound",
            f"bytes allocated: at least {many.allocated_bytes / max(few.allocated_bytes, 1):.1f}x "
            f"({few.allocated_bytes:,} -> {many.allocated_bytes:,} when counting stopped)",
        ]
    assert not over, contract_failure(
        target,
        FAMILY.name,
        f"property 'linear cost' violated by {FAMILY.symbol}",
        [
            f"growing the population {COST_GROWTH}x, from {small:,} to {COST_GROWTH * small:,} grads "
            f"({'one chunk' if budget is None else f'budget {budget} bytes'}), grew its work by more than linear "
            f"allows ({bound:g}x: {COST_GROWTH}x with slack {COST_SLACK}):",
            *lines,
        ],
    )
