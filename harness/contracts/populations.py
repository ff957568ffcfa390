"""Grad populations: what a chunker or an all-reduce gets handed in real training, and the strategies that draw them.

The population model is here: the picklable specs of the equivalence family's fake model chunks
(:class:`FakeParameter`, :class:`Population`), the layouts, grad kinds, grad buffers and FSDP placements they may
take, and the Megatron configs a chunk of a population carries. The main process draws them and the ranks
(:mod:`harness.contracts.equivalence`) build them, so both read one definition. Megatron is imported only inside the
functions that build its configs: the case files import this module at collection for its strategies.

Random shapes and dtypes alone rarely land a budget exactly on a chunk boundary, and never look like a model; the
strategies here also build GPT-like layer lists and place budgets on and around tensor-size boundaries, where
off-by-one mistakes live.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from harness.targets.megatron_names import TINY_GPT

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GRAD_KINDS = ("main_grad", "grad", "main_grad_none", "grad_none")


@dataclass(frozen=True)
class FakeParameter:
    """One parameter of a fake module: where its grad lives and which upstream rule may select it."""

    name: str
    numel: int
    dtype: str
    grad_kind: str
    sequence_parallel: bool = False
    average_across_tp: bool = False
    requires_grad: bool = True
    layout: str = "contiguous"


LAYOUTS = ("contiguous", "strided", "transposed")
"""How a grad is laid out in memory: contiguous, every other element of a buffer twice its size, or a 2-D transpose
(as a TP-sharded weight's grad can be); the logical values are the same in each."""

GRAD_BUFFERS = ("none", "forward", "reverse")
"""Where a chunk's grads live: each in its own storage, or side by side in one buffer in the params' order or the
reverse (Megatron's grad buffer): the layout that lets a subject reduce neighbouring grads without a copy, and that a
subject reducing a region with a gap in it gets wrong."""

MANAGED_FSDP_FLAG = "use_custom_fsdp"
"""0.13's flag, whose FSDP grads live in a separate attribute; under any other flag upstream reads (0.14's
``use_megatron_fsdp``, or whatever a later release renames it to) they are sharded ``DTensor``s."""

FSDP_GRADS = {
    "sharded": "a DTensor sharded over the data-parallel group, whose local shard upstream reduces in place",
    "managed": "a tensor in the separate `fsdp_managed_main_grad` attribute",
}
"""Where a grad of a chunk with FSDP on lives (see ``fsdp_grads``)."""


def fsdp_grads(fsdp_flag: str) -> str:
    """``managed`` under 0.13's flag, else ``sharded``: keyed on the one flag that differs, so a release that renames
    the newer flag is still laid out as its upstream reads it."""
    return "managed" if fsdp_flag == MANAGED_FSDP_FLAG else "sharded"


FSDP_GRAD_ATTR = "fsdp_managed_main_grad"

GROUPS = {
    "implicit": "no tp_group argument: parallel_state's TP group, as 0.13 and a direct call use",
    "given": "parallel_state's TP group passed as tp_group, as finalize_model_grads does from 0.14 on",
    "other": "a TP-sized group that is not parallel_state's passed as tp_group: the caller's group must be used",
}
"""How the tensor-parallel group reaches the all-reduce in an example."""


@dataclass(frozen=True)
class Population:
    """A fake model chunk list plus the config flags upstream's selection reads."""

    chunks: tuple[tuple[FakeParameter, ...], ...]
    sequence_parallel: bool
    qk_layernorm: bool
    seed: int
    group: str = "implicit"
    grad_buffer: str = "none"
    """Whether each chunk's contiguous grads are views of one buffer per dtype, and in which order (one of
    ``GRAD_BUFFERS``)."""
    fsdp_chunks: int = 0
    """How many chunks, counted from the last, have the FSDP flag on in their ``ddp_config`` (see ``FSDP_GRADS``).

    Always the last ones: upstream writes every grad back under the flag of the last chunk its selection loop saw (the
    loop variable outlives the loop), so a chunk with FSDP on before one with it off has its grads re-sharded as if
    they were whole tensors by upstream itself. Real models give every chunk the same ``ddp_config``; the trailing
    order still tells a subject that reads one chunk's flag for all from one that reads each chunk's own."""


@functools.cache
def population_config(sequence_parallel: bool, qk_layernorm: bool, tensor_parallel: int) -> Any:
    """The ``TransformerConfig`` of a small model with the population's flags, built by Megatron itself (its
    ``__post_init__`` fills every derived field); ``TINY_GPT``'s sizes: 4 heads, so any TP size the cases use divides
    them."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=TINY_GPT.num_layers,
        hidden_size=TINY_GPT.hidden_size,
        num_attention_heads=TINY_GPT.num_attention_heads,
        sequence_parallel=sequence_parallel,
        qk_layernorm=qk_layernorm,
        tensor_model_parallel_size=tensor_parallel,
    )


def ddp_config(fsdp_flag: str, fsdp: bool) -> Any:
    """A real ``DistributedDataParallelConfig`` with the target's FSDP flag set as the chunk has it."""
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(**{fsdp_flag: fsdp})


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


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


@st.composite
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
                dtype=draw(st.sampled_from(_DTYPES)),
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


@st.composite
def _gpt_like_specs(draw: st.DrawFn) -> list[TensorSpec]:
    """A GPT-like population with drawn depth, width, dtype and qk-layernorm head size."""
    return gpt_layer_specs(
        num_layers=draw(st.integers(1, 4)),
        hidden=draw(st.integers(1, 48)),
        dtype=draw(st.sampled_from(_DTYPES)),
        qk_head_dim=draw(st.sampled_from([0, 4, 8])),
    )


def populations() -> st.SearchStrategy[list[TensorSpec]]:
    """Either kind of population."""
    return st.one_of(_random_specs(), _gpt_like_specs())


@st.composite
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


@st.composite
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


@st.composite
def _fsdp_chunks(draw: st.DrawFn, chunks: int, order: str) -> int:
    """How many trailing chunks have FSDP on: one example in three draws some, and shrinking turns FSDP off."""
    if order == "off" or draw(st.integers(0, 2)) < 2:
        return 0
    return chunks if order == "all" else draw(st.integers(1, chunks))


@st.composite
def fake_module_populations(
    draw: st.DrawFn, max_params: int = 12, groups: tuple[str, ...] = ("implicit",), fsdp: str = "off"
) -> Population:
    """Model chunks whose params exercise every branch of upstream's selection and write-back.

    Sequence-parallel and TP-averaged params, qk-layernorm names with the flag on and off, frozen params, ``None``
    grads, ``main_grad`` beside ``grad``, three dtypes (mixed, or one per chunk), grads in storages of their own or
    side by side in one grad buffer; one or two model chunks, with FSDP on in the chunks ``fsdp`` allows (one of
    :data:`FSDP_ORDERS`); and how the TP group reaches the call, one of ``groups`` (see
    :data:`GROUPS`).
    """
    chunks = []
    dtypes = st.sampled_from(sorted(DTYPES))
    for _ in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, max_params))
        # Half the chunks hold one dtype, as most models' grads do (and as neighbours in one grad buffer must).
        chunk_dtype = draw(st.one_of(st.none(), dtypes))
        specs = []
        for i in range(count):
            leaf = draw(st.sampled_from(_PARAM_LEAVES))
            specs.append(
                FakeParameter(
                    name=f"decoder.layers.{i}.{leaf}",
                    numel=draw(_grad_sizes()),
                    dtype=chunk_dtype or draw(dtypes),
                    grad_kind=draw(st.sampled_from(GRAD_KINDS)),
                    sequence_parallel=draw(st.booleans()),
                    average_across_tp=draw(st.integers(0, 4)) == 0,
                    requires_grad=draw(st.integers(0, 5)) != 0,
                    layout=draw(st.sampled_from(("contiguous", *LAYOUTS))),  # half the grads contiguous
                )
            )
        chunks.append(tuple(specs))
    return Population(
        chunks=tuple(chunks),
        sequence_parallel=draw(st.booleans()),
        qk_layernorm=draw(st.booleans()),
        seed=draw(st.integers(0, 2**20)),
        group=draw(st.sampled_from(groups)),
        grad_buffer=draw(st.sampled_from(GRAD_BUFFERS)),
        fsdp_chunks=draw(_fsdp_chunks(len(chunks), fsdp)),
    )


@st.composite
def budgets_for_population(draw: st.DrawFn, population: Population) -> int:
    """The smallest budget allowed, around one grad's size, or beyond the whole population; never 0 (an empty grad has
    no bytes, and a budget of 0 is no budget).

    The smallest is 1 byte, or 1/``SLICES_PER_GRAD`` of the largest grad: a design that reduces a grad over the
    budget in budget-sized slices (as correct as reducing it whole) then makes at most that many collectives per
    grad, as it would with real budgets (hundreds of MiB) next to real grads; a 4 MiB grad under a 1-byte budget
    would take it four million.
    """
    sizes = [
        max(1, s.numel * torch.empty((), dtype=DTYPES[s.dtype]).element_size())
        for chunk in population.chunks
        for s in chunk
    ]
    smallest = max(1, -(-max(sizes) // SLICES_PER_GRAD))
    at_least = [size for size in sizes if size >= smallest]
    return draw(st.one_of(st.just(smallest), st.sampled_from(at_least), st.integers(smallest, 2 * sum(sizes) + 1)))


SLICES_PER_GRAD = 64
"""The most budget-sized slices a generated example asks of its largest grad (see ``budgets_for_population``)."""


def _gpt_chunk(layers: range) -> tuple[FakeParameter, ...]:
    """A GPT chunk's params in model order, fp32 ``main_grad``s: sequence-parallel norms and biases, qk-layernorms,
    a router bias averaged across TP, and the TP-sharded fc1 weight (never selected) between them."""

    def param(name: str, numel: int, **rule: bool) -> FakeParameter:
        return FakeParameter(name, numel, "fp32", "main_grad", **rule)

    specs: list[FakeParameter] = []
    for layer in layers:
        prefix = f"decoder.layers.{layer}"
        specs += [
            param(f"{prefix}.input_layernorm.weight", 64, sequence_parallel=True),
            param(f"{prefix}.self_attention.q_layernorm.weight", 16),
            param(f"{prefix}.self_attention.k_layernorm.weight", 16),
            param(f"{prefix}.self_attention.linear_proj.bias", 64, sequence_parallel=True),
            param(f"{prefix}.mlp.linear_fc1.weight", 256),
            param(f"{prefix}.pre_mlp_layernorm.weight", 64, sequence_parallel=True),
            param(f"{prefix}.mlp.router.expert_bias", 8, average_across_tp=True),
        ]
    return tuple(specs)


MODEL_LIKE_BUDGET = 1024
"""Bytes: several selected grads per chunk, so a chunk spans params the selection skips."""


def model_like_populations(fsdp: str, groups: tuple[str, ...] = ("implicit",)) -> list[Population]:
    """Explicit examples every run tries first, built like a real model: two pipeline chunks of a GPT, their
    ``main_grad``s side by side in Megatron's grad buffer (filled in reverse); without FSDP and with it as ``fsdp``
    allows (the last chunk, or both); and with the TP group reaching the call each way of ``groups``. Generated
    populations reach each of these paths only now and then."""
    chunks = (_gpt_chunk(range(0, 2)), _gpt_chunk(range(2, 4)))
    common = {"chunks": chunks, "sequence_parallel": True, "qk_layernorm": True, "seed": 11, "grad_buffer": "reverse"}
    examples = [Population(group=group, **common) for group in groups]
    if fsdp != "off":
        examples.append(Population(fsdp_chunks=1 if fsdp == "trailing" else 2, **common))
    return examples


LARGEST_BUFFER = Population(
    chunks=(
        tuple(
            FakeParameter(
                f"decoder.layers.{i}.input_layernorm.weight", 4_096, "fp32", "main_grad", sequence_parallel=True
            )
            for i in range(256)
        ),
    ),
    sequence_parallel=True,
    qk_layernorm=False,
    seed=7,
)
"""4 MiB of sequence-parallel fp32 grads, 16 KiB each, separate tensors: the largest-buffer case's population."""
LARGEST_BUFFER_BUDGET = 64 * 1024
"""Four grads per chunk, so a design that flattens each chunk allocates; the memory bound (8 chunks, 512 KiB) is an
eighth of what holding every grad at once takes."""
