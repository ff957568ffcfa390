"""The population model: what an all-reduce gets handed in real training, as picklable specs.

The specs of the equivalence family's fake model chunks (:class:`FakeParameter`, :class:`Population`), the layouts,
grad kinds, grad buffers and FSDP placements they may take, the Megatron configs a chunk of a population carries, and
the explicit examples every run tries (model-like chunks, the largest buffer). The main process draws populations
(:mod:`harness.contracts.population_strategies`) and the ranks (:mod:`harness.contracts.equivalence`) build them, so
both read one definition. No hypothesis here, and Megatron only inside the functions that build its configs: rank
processes import this module to unpickle what they are sent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import torch

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


LAYOUTS = ("contiguous", "transposed")
"""How a grad Megatron hands over is laid out in memory: contiguous, or a 2-D transpose (as a TP-sharded weight's
grad can be); both dense, the logical values the same in each. ``main_grad`` is a view of DDP's contiguous grad
buffer, and autograd gives ``grad`` its param's dense strides."""
GAPPED = "strided"
"""Every other element of a buffer twice its size: a grad with gaps, which no Megatron path makes. Upstream's copy
reduces it right all the same; a subject that all-reduces it in place reduces the gaps (gloo takes the storage as
contiguous). Checked as an advisory of its own (``test_matches_upstream_on_grads_with_gaps``)."""

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
    allows (the last chunk, or both); with the TP group reaching the call each way of ``groups``; and once with
    :func:`_edge_sized` grads. Generated populations reach each of these paths only now and then."""
    chunks = (_gpt_chunk(range(0, 2)), _gpt_chunk(range(2, 4)))
    common = {"chunks": chunks, "sequence_parallel": True, "qk_layernorm": True, "seed": 11, "grad_buffer": "reverse"}
    examples = [Population(group=group, **common) for group in groups]
    if fsdp != "off":
        examples.append(Population(fsdp_chunks=1 if fsdp == "trailing" else 2, **common))
    examples.append(Population(**{**common, "chunks": (_edge_sized(chunks[0]), chunks[1])}))
    return examples


EDGE_GRAD_SIZES = {"input_layernorm.weight": 0, "self_attention.linear_proj.bias": 1 << 18}
"""Element counts the edge-sized example gives layer 0's two sequence-parallel grads, which upstream reduces: none
(a zero-size shard) and 1 MiB of fp32 (one grad far beyond the budget). Generated populations draw each for one
grad in twenty, yet a derandomized run may meet neither (megatron-0.13's did not, and missed a subject that raises
on an empty grad)."""


def _edge_sized(chunk: tuple[FakeParameter, ...]) -> tuple[FakeParameter, ...]:
    """``chunk`` with layer 0's grads sized as :data:`EDGE_GRAD_SIZES` says."""
    sizes = {f"decoder.layers.0.{leaf}": numel for leaf, numel in EDGE_GRAD_SIZES.items()}
    return tuple(replace(spec, numel=sizes[spec.name]) if spec.name in sizes else spec for spec in chunk)


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
