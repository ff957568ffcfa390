"""The strategies that draw grad populations for the chunk-splitting and equivalence families.

Random shapes and dtypes alone rarely land a budget exactly on a chunk boundary, and never look like a model; the
strategies here also build GPT-like layer lists and place budgets on and around tensor-size boundaries, where
off-by-one mistakes live. What they draw is defined in :mod:`harness.contracts.populations`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from harness.contracts.gate_strategies import composite
from harness.contracts.populations import DTYPES, GRAD_BUFFERS, GRAD_KINDS, LAYOUTS, FakeParameter, Population
from harness.contracts.strategy_cache import sampled

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_SPEC_DTYPES = sampled(_DTYPES)
"""Strategies drawn from in every example are built once (:mod:`harness.contracts.strategy_cache`)."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape, dtype and layout of one grad, before it is materialised."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    transposed: bool = False

    def nbytes(self) -> int:
        numel = 1
        for dim in self.shape:
            numel *= dim
        return numel * torch.empty((), dtype=self.dtype).element_size()

    def empty(self) -> torch.Tensor:
        """An uninitialised tensor of this spec; a non-contiguous transposed view when ``transposed``."""
        if self.transposed and len(self.shape) == 2:
            return torch.empty(self.shape[::-1], dtype=self.dtype).t()
        return torch.empty(self.shape, dtype=self.dtype)


@composite
def _random_specs(draw: st.DrawFn, max_tensors: int = 24) -> list[TensorSpec]:
    """Unstructured populations: 0-3 dims, zero-size dims, mixed dtypes, some non-contiguous views."""
    count = draw(st.integers(0, max_tensors))
    specs = []
    for i in range(count):
        ndim = draw(st.integers(0, 3))
        shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
        specs.append(
            TensorSpec(
                name=f"t{i}",
                shape=shape,
                dtype=draw(_SPEC_DTYPES),
                transposed=ndim == 2 and draw(st.booleans()),
            )
        )
    return specs


def gpt_layer_specs(num_layers: int, hidden: int, dtype: torch.dtype, qk_head_dim: int = 0) -> list[TensorSpec]:
    """The non-TP grads of a GPT-like stack: layernorm weights/biases, qk-layernorms, row-parallel biases."""
    specs: list[TensorSpec] = []
    for layer in range(num_layers):
        prefix = f"decoder.layers.{layer}"
        specs += [
            TensorSpec(f"{prefix}.input_layernorm.weight", (hidden,), dtype),
            TensorSpec(f"{prefix}.input_layernorm.bias", (hidden,), dtype),
        ]
        if qk_head_dim:
            specs += [
                TensorSpec(f"{prefix}.self_attention.q_layernorm.weight", (qk_head_dim,), dtype),
                TensorSpec(f"{prefix}.self_attention.k_layernorm.weight", (qk_head_dim,), dtype),
            ]
        specs += [
            TensorSpec(f"{prefix}.self_attention.linear_proj.bias", (hidden,), dtype),
            TensorSpec(f"{prefix}.pre_mlp_layernorm.weight", (hidden,), dtype),
            TensorSpec(f"{prefix}.pre_mlp_layernorm.bias", (hidden,), dtype),
            TensorSpec(f"{prefix}.mlp.linear_fc2.bias", (hidden,), dtype),
        ]
    specs += [
        TensorSpec("decoder.final_layernorm.weight", (hidden,), dtype),
        TensorSpec("decoder.final_layernorm.bias", (hidden,), dtype),
    ]
    return specs


@composite
def _gpt_like_specs(draw: st.DrawFn) -> list[TensorSpec]:
    """A GPT-like population with drawn depth, width, dtype and qk-layernorm head size."""
    return gpt_layer_specs(
        num_layers=draw(st.integers(1, 4)),
        hidden=draw(st.integers(1, 48)),
        dtype=draw(_SPEC_DTYPES),
        qk_head_dim=draw(st.sampled_from([0, 4, 8])),
    )


@functools.cache
def populations() -> st.SearchStrategy[list[TensorSpec]]:
    """Either kind of population (one strategy object, drawn from by every example)."""
    return st.one_of(_random_specs(), _gpt_like_specs())


@composite
def split_examples(draw: st.DrawFn) -> tuple[list[TensorSpec], int]:
    """A chunk-splitting example: a population and a budget for it."""
    specs = draw(populations())
    return specs, draw(budgets_for(specs))


@composite
def budgets_for(draw: st.DrawFn, specs: list[TensorSpec]) -> int:
    """A positive budget: on or next to a size, two neighbours' sum or a running sum, or anywhere past the total."""
    sizes = [s.nbytes() for s in specs]
    boundaries = {1}
    running = 0
    for size, following in zip(sizes, [*sizes[1:], 0], strict=False):
        running += size
        boundaries.update((size, size + following, running))
    total = max(running, 1)
    near_boundary = st.builds(
        lambda b, delta: max(1, b + delta), st.sampled_from(sorted(boundaries)), st.integers(-1, 1)
    )
    return draw(st.one_of(near_boundary, st.integers(1, 2 * total + 1)))


_PARAM_LEAVES = (
    "input_layernorm.weight",
    "input_layernorm.bias",
    "self_attention.q_layernorm.weight",
    "self_attention.k_layernorm.weight",
    "self_attention.linear_proj.bias",
    "mlp.linear_fc1.weight",
    "mlp.router.expert_bias",
    "pre_mlp_layernorm.weight",
)


@composite
def _grad_sizes(draw: st.DrawFn) -> int:
    """Element counts of one grad: mostly a few dozen; one grad in twenty has none at all, one in twenty holds 1-4 MiB
    of fp32 (so a grad alone outgrows the budget and the bounds see real sizes)."""
    kind = draw(st.integers(0, 19))  # hypothesis shrinks toward 0: a failing example shrinks to small, non-empty grads
    if kind == 18:
        return 0
    if kind == 19:
        return draw(st.integers(1 << 18, 1 << 20))
    return draw(st.integers(1, 40))


FSDP_ORDERS = ("off", "trailing", "all")
"""Which chunks may have FSDP on: none; any number of the last ones (each chunk's own flag decides how its grads
are read, from 0.14 on); or none or every one (0.13 writes back under the last chunk's flag, into an attribute the
other chunks' params do not have)."""


@functools.cache
@composite
def _fsdp_chunks(draw: st.DrawFn, chunks: int, order: str) -> int:
    """How many trailing chunks have FSDP on: one example in three draws some, and shrinking turns FSDP off."""
    if order == "off" or draw(st.integers(0, 2)) < 2:
        return 0
    return chunks if order == "all" else draw(st.integers(1, chunks))


_GRAD_SIZES = _grad_sizes()
_PARAM_DTYPES = sampled(tuple(sorted(DTYPES)))
_CHUNK_DTYPES = st.one_of(st.none(), _PARAM_DTYPES)
_LEAVES = sampled(_PARAM_LEAVES)
_GRAD_KIND_NAMES = sampled(GRAD_KINDS)
_GRAD_BUFFER_NAMES = sampled(GRAD_BUFFERS)


@composite
def fake_module_populations(
    draw: st.DrawFn,
    max_params: int = 12,
    groups: tuple[str, ...] = ("implicit",),
    fsdp: str = "off",
    layouts: tuple[str, ...] = LAYOUTS,
) -> Population:
    """Model chunks whose params exercise every branch of upstream's selection and write-back.

    Sequence-parallel and TP-averaged params, qk-layernorm names with the flag on and off, frozen params, ``None``
    grads, ``main_grad`` beside ``grad``, three dtypes (mixed, or one per chunk), grads in storages of their own or
    side by side in one grad buffer; one or two model chunks, with FSDP on in the chunks ``fsdp`` allows (one of
    :data:`FSDP_ORDERS`); and how the TP group reaches the call, one of ``groups`` (see
    :data:`GROUPS`); each grad laid out as one of ``layouts``, half of them contiguous.
    """
    chunks = []
    layout_names = sampled(("contiguous", *layouts))
    for _ in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, max_params))
        # Half the chunks hold one dtype, as most models' grads do (and as neighbours in one grad buffer must).
        chunk_dtype = draw(_CHUNK_DTYPES)
        specs = []
        for i in range(count):
            leaf = draw(_LEAVES)
            specs.append(
                FakeParameter(
                    name=f"decoder.layers.{i}.{leaf}",
                    numel=draw(_GRAD_SIZES),
                    dtype=chunk_dtype or draw(_PARAM_DTYPES),
                    grad_kind=draw(_GRAD_KIND_NAMES),
                    sequence_parallel=draw(st.booleans()),
                    average_across_tp=draw(st.integers(0, 4)) == 0,
                    requires_grad=draw(st.integers(0, 5)) != 0,
                    layout=draw(layout_names),
                )
            )
        chunks.append(tuple(specs))
    return Population(
        chunks=tuple(chunks),
        sequence_parallel=draw(st.booleans()),
        qk_layernorm=draw(st.booleans()),
        seed=draw(st.integers(0, 2**20)),
        group=draw(sampled(tuple(groups))),
        grad_buffer=draw(_GRAD_BUFFER_NAMES),
        fsdp_chunks=draw(_fsdp_chunks(len(chunks), fsdp)),
    )


@composite
def budgets_for_population(draw: st.DrawFn, population: Population) -> int:
    """The smallest budget allowed, around one grad's size, or beyond the whole population; never 0 (an empty grad has
    no bytes, and a budget of 0 is no budget).

    The smallest is one element of the widest dtype a coalesced buffer of these grads can have (a budget that cannot
    hold one element is no configuration a framework runs, and a framework may refuse it), or 1/``SLICES_PER_GRAD``
    of the largest grad: a design that reduces a grad over the budget in budget-sized slices (as correct as reducing
    it whole) then makes at most that many collectives per grad, as it would with real budgets (hundreds of MiB)
    next to real grads; a 4 MiB grad under a 1-byte budget would take it four million.
    """
    specs = [s for chunk in population.chunks for s in chunk]
    elements = [torch.empty((), dtype=DTYPES[s.dtype]).element_size() for s in specs]
    sizes = [max(1, s.numel * element) for s, element in zip(specs, elements, strict=True)]
    # Upstream coalesces each op's grads in one buffer of their promoted dtype (bf16 beside fp16 is fp32).
    dtypes = [DTYPES[s.dtype] for s in specs]
    coalesced = functools.reduce(torch.promote_types, dtypes) if dtypes else torch.uint8
    element = max([*elements, torch.empty((), dtype=coalesced).element_size()])
    smallest = max(element, -(-max(sizes, default=1) // SLICES_PER_GRAD))
    at_least = [size for size in sizes if size >= smallest] or [smallest]
    # Empty grads whose coalesced dtype is wider than their own have fewer bytes, all told, than the smallest budget.
    beyond = max(smallest, 2 * sum(sizes) + 1)
    return draw(st.one_of(st.just(smallest), st.sampled_from(at_least), st.integers(smallest, beyond)))


SLICES_PER_GRAD = 64
"""The most budget-sized slices a generated example asks of its largest grad (see ``budgets_for_population``)."""


@composite
def equivalence_examples(
    draw: st.DrawFn, groups: tuple[str, ...] = ("implicit",), fsdp: str = "off", layouts: tuple[str, ...] = LAYOUTS
) -> tuple[Population, int]:
    """An equivalence example: model chunks (see :func:`fake_module_populations`) and a budget for them."""
    population = draw(fake_module_populations(groups=groups, fsdp=fsdp, layouts=layouts))
    return population, draw(budgets_for_population(population))
