"""Upstream vs subject all-reduce on identical fake modules, inside real rank processes.

The main process describes a population (picklable specs, :mod:`harness.contracts.populations`); every rank
materialises two identical copies with rank-dependent values, runs upstream on one and the subject on the other in the
same process groups, and reports each difference it sees: grads that differ, grads that should not have been touched,
grad objects re-bound differently, collectives with another op or group, buffers larger than the budget allows, more
memory held at once than the budget allows (the bound in :mod:`harness.contracts.allocations`), and tensors made on
another device than the grads'. The same comparison on a real GPTModel step is :mod:`harness.contracts.gpt_step`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import resource
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from harness.contracts.allocations import AllocationSummary, AllocationTracker
from harness.contracts.collectives import CollectiveRecorder
from harness.contracts.populations import (
    DTYPES,
    FSDP_GRAD_ATTR,
    FSDP_GRADS,
    GROUPS,
    FakeParameter,
    Population,
    ddp_config,
    fsdp_grads,
    population_config,
)
from harness.contracts.rank_report import RankReport, check_memory
from harness.ranks import megatron_state as megatron_ranks
from harness.ranks import placement
from harness.subjects.loading import SubjectRef


class _FakeChunk(torch.nn.Module):
    """A model chunk as Megatron's DDP wrapper presents it to ``finalize_model_grads``: named parameters, a real
    ``DistributedDataParallelConfig`` as ``ddp_config`` and the model's real ``TransformerConfig`` as ``config``
    (``get_model_config(model[0])`` finds it), so a subject reading any field of either gets Megatron's own value."""


def _config_of(population: Population) -> Any:
    from megatron.core import parallel_state

    tensor_parallel = parallel_state.get_tensor_model_parallel_world_size()
    return population_config(population.sequence_parallel, population.qk_layernorm, tensor_parallel)


def _attach(root: torch.nn.Module, dotted: str, param: torch.nn.Parameter) -> None:
    """``param`` under its dotted name, the submodules on its path made where missing (looked up in ``_modules``:
    ``hasattr`` on a module raises and catches an ``AttributeError`` for each one missing)."""
    module = root
    *path, leaf = dotted.split(".")
    for part in path:
        child = module._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            module.add_module(part, child)
        module = child
    module.register_parameter(leaf, param)


@functools.lru_cache(maxsize=64)
def _generated(seed: int, rank: int, index: int, numel: int, dtype: str) -> torch.Tensor:
    """One rank's values of one grad, kept for the rest of the example: each rank builds its population twice
    (upstream's copy and the subject's) and reads every rank of its group's values again for a float64 truth, and
    a grad can hold a million elements. Drawn in fp32, which every grad dtype is narrower than or equal to: a draw in
    float64 cost five times as much for the same values once rounded."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + index)
    return torch.randn(numel, generator=generator, dtype=torch.float32).to(DTYPES[dtype])


def _values(spec: FakeParameter, seed: int, rank: int, index: int) -> torch.Tensor:
    """``rank``'s values of the ``index``-th grad, a copy of its own (a grad is reduced in place)."""
    return _generated(seed, rank, index, spec.numel, spec.dtype).clone()


def _shape(spec: FakeParameter) -> tuple[int, ...]:
    """A transposed grad is 2-D (two columns, at least two rows: torch refuses to write into a one-row transpose,
    whose strides look overlapping to it); every other grad is 1-D."""
    if spec.layout == "transposed" and spec.numel >= 4 and spec.numel % 2 == 0:
        return (spec.numel // 2, 2)
    return (spec.numel,)


def _laid_out(values: torch.Tensor, spec: FakeParameter) -> torch.Tensor:
    """``values`` in ``spec``'s layout and shape, in logical (row-major) order: a non-contiguous grad holds the same
    values as a contiguous one, only its memory differs."""
    shape = _shape(spec)
    if spec.numel == 0:
        return values
    if spec.layout == "strided":
        grad = torch.zeros(2 * spec.numel, dtype=values.dtype, device=values.device)[::2]
    elif len(shape) == 2:
        grad = torch.zeros(shape[::-1], dtype=values.dtype, device=values.device).t()
    else:
        return values
    grad.copy_(values.view(shape))
    return grad


def population_device() -> torch.device:
    """Where this rank's population lives: the device its pool's placement gave it (a GPU under NCCL and in the
    one-GPU mode, else the CPU)."""
    return torch.device(placement.rank_device())


def _build_chunks(population: Population, rank: int, fsdp_flag: str) -> list[torch.nn.Module]:
    """Materialise the population as model chunks on the rank's device (:func:`population_device`); the same call on
    the same rank gives bitwise-equal values."""
    device = population_device()
    chunks = []
    index = 0
    first_fsdp = len(population.chunks) - population.fsdp_chunks
    for c, chunk_specs in enumerate(population.chunks):
        chunk = _FakeChunk()
        fsdp = c >= first_fsdp
        chunk.ddp_config = ddp_config(fsdp_flag, fsdp)
        chunk.config = _config_of(population)
        for spec, grad in zip(chunk_specs, _chunk_grads(chunk_specs, population, rank, index, device), strict=True):
            if grad is not None and fsdp and fsdp_grads(fsdp_flag) == "sharded":
                grad = _sharded(grad)
            # A sharded grad's shape is the whole tensor's, which the param must have to take it as ``.grad``.
            shape = _shape(spec) if grad is None else grad.shape
            param = torch.nn.Parameter(torch.zeros(shape, dtype=DTYPES[spec.dtype], device=device))
            param.requires_grad = spec.requires_grad
            if spec.sequence_parallel:
                param.sequence_parallel = True
            if spec.average_across_tp:
                param.average_gradients_across_tp_domain = True
            if fsdp and fsdp_grads(fsdp_flag) == "managed":
                setattr(param, FSDP_GRAD_ATTR, grad)
            else:
                if spec.grad_kind.startswith("main_grad"):
                    param.main_grad = grad
                else:
                    param.grad = grad
            _attach(chunk, spec.name, param)
            index += 1
        chunks.append(chunk)
    return chunks


def _chunk_grads(
    specs: tuple[FakeParameter, ...], population: Population, rank: int, first_index: int, device: torch.device
) -> list[torch.Tensor | None]:
    """One chunk's grads, in its params' order (``None`` where the spec says so). With a grad buffer, the contiguous
    grads of each dtype are consecutive views of one buffer, in the params' order or the reverse, as Megatron's
    ``main_grad``s are views of its grad buffer (which it fills in reverse)."""
    grads: list[torch.Tensor | None] = []
    for i, spec in enumerate(specs, start=first_index):
        values = None if spec.grad_kind.endswith("_none") else _values(spec, population.seed, rank, i).to(device)
        grads.append(None if values is None else _laid_out(values, spec))
    if population.grad_buffer == "none":
        return grads
    order = list(range(len(specs)))
    if population.grad_buffer == "reverse":
        order.reverse()
    for dtype in {spec.dtype for spec in specs}:
        members = [i for i in order if grads[i] is not None and specs[i].dtype == dtype and grads[i].is_contiguous()]
        buffer = torch.empty(sum(specs[i].numel for i in members), dtype=DTYPES[dtype], device=device)
        offset = 0
        for i in members:
            view = buffer[offset : offset + specs[i].numel].view(grads[i].shape)
            grads[i] = view.copy_(grads[i])
            offset += specs[i].numel
    return grads


def _sharded(local: torch.Tensor) -> torch.Tensor:
    """``local`` as this rank's shard of a grad sharded over the data-parallel group, as Megatron-FSDP holds it."""
    from torch.distributed.tensor import DTensor, Shard

    return DTensor.from_local(local, megatron_ranks.data_parallel_mesh(local.device.type), [Shard(0)], run_check=False)


def _grad_of(param: torch.nn.Parameter) -> torch.Tensor | None:
    for attr in (FSDP_GRAD_ATTR, "main_grad"):
        if hasattr(param, attr):
            return getattr(param, attr)
    return param.grad


def _local(grad: torch.Tensor) -> torch.Tensor:
    """The values this rank holds: a sharded grad's local shard, any other grad itself."""
    return getattr(grad, "_local_tensor", grad)


def _snapshot(chunks: list[torch.nn.Module]) -> dict[str, tuple[torch.Tensor | None, torch.Tensor | None, int]]:
    """Per param: the grad object, a host copy of this rank's values, and their storage address."""
    snap = {}
    for c, chunk in enumerate(chunks):
        for name, param in chunk.named_parameters():
            grad = _grad_of(param)
            local = None if grad is None else _local(grad)
            copy = None if local is None else local.detach().to("cpu", copy=True)
            snap[f"{c}:{name}"] = (grad, copy, 0 if local is None else local.data_ptr())
    return snap


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor``'s values in logical order (a one-element view with stride 2 counts as contiguous to
    torch, yet cannot be viewed as bytes: copy into a fresh flat buffer)."""
    flat = torch.empty(tensor.numel(), dtype=tensor.dtype)
    return flat.copy_(tensor.detach().reshape(-1)).view(torch.uint8)


def _without_none_grads(population: Population) -> Population:
    """The population as upstream sees it when it skips ``None`` grads: those params excluded from selection."""
    chunks = tuple(
        tuple(
            FakeParameter(**{**spec.__dict__, "requires_grad": False}) if spec.grad_kind.endswith("_none") else spec
            for spec in chunk
        )
        for chunk in population.chunks
    )
    return dataclasses.replace(population, chunks=chunks)


def _expected_reference(
    population: Population,
    rank: int,
    fsdp_flag: str,
    upstream: Any,
    config: Any,
    measure: bool = False,
    allocator: str | None = None,
) -> tuple[list[torch.nn.Module], str | None, list, AllocationSummary | None]:
    """Run upstream; where it fails on ``None`` grads (versions before the skip), run it without them.

    With ``measure``, also returns what upstream's run allocated (the run whose result is the expectation), counted
    as ``allocator`` counts (see :class:`AllocationTracker`).
    """
    chunks = _build_chunks(population, rank, fsdp_flag)
    group, given = call_group(population)
    tracker = AllocationTracker(_grads_device(chunks), allocator=allocator) if measure else contextlib.nullcontext()
    with CollectiveRecorder(group) as recorder:
        try:
            with tracker:
                upstream(chunks, config, **given)
            return chunks, None, recorder.calls, _summary(tracker)
        except AttributeError as err:
            if not any(s.grad_kind.endswith("_none") for chunk in population.chunks for s in chunk):
                raise
            raised = f"{type(err).__name__}: {err}"
    chunks = _build_chunks(_without_none_grads(population), rank, fsdp_flag)
    tracker = AllocationTracker(_grads_device(chunks), allocator=allocator) if measure else contextlib.nullcontext()
    with CollectiveRecorder(group) as recorder, tracker:
        upstream(chunks, config, **given)
    return chunks, raised, recorder.calls, _summary(tracker)


def _summary(tracker: object) -> AllocationSummary | None:
    return tracker.summary() if isinstance(tracker, AllocationTracker) else None


def _grads_device(chunks: list[torch.nn.Module]) -> torch.device:
    """Where the population's grads live (the first grad's device; they are built together)."""
    for chunk in chunks:
        for param in chunk.parameters():
            grad = _grad_of(param)
            if grad is not None:
                return grad.device
    return torch.device("cpu")


def tp_group() -> Any:
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group()


def call_group(population: Population) -> tuple[Any, dict[str, Any]]:
    """The group the example's all-reduce must use, and the ``tp_group`` keyword that hands it over (none for
    ``implicit``); the ``other`` group is made by the rank pool beside parallel_state's."""
    if population.group == "implicit":
        return tp_group(), {}
    group = tp_group() if population.group == "given" else megatron_ranks.other_tp_group()
    return group, {"tp_group": group}


_subjects: dict[str, Any] = {}


def subject_once(subject: SubjectRef) -> Any:
    """The subject loaded once per rank process from the session's reference (a file subject would otherwise be
    re-executed per example, a declaration read again)."""
    if subject.name not in _subjects:
        _subjects[subject.name] = subject.load()
    return _subjects[subject.name]


def not_restored(rank: int, pin: Any, bound_before_install: Any) -> list[str]:
    """Problem lines when ``uninstall()`` left upstream's names bound otherwise than before ``install()``."""
    changes = megatron_ranks.upstream_changes(pin, "and uninstall() did not restore it", expected=bound_before_install)
    return [f"rank {rank}: {change}" for change in changes]


def compare_task(
    rank: int,
    world_size: int,
    population: Population,
    subject_ref: SubjectRef,
    budget: int,
    tensor_parallel: int,
    bitwise: bool,
    measure_upstream: bool = False,
    allocator: str | None = None,
) -> RankReport:
    """Rank-side body of one equivalence example (sent through the rank pool).

    What the subject's call (with its ``install()``) allocates is always measured; upstream's only with
    ``measure_upstream`` (the dispatch mode costs a little per op, and only the memory report reads it). The grads'
    device decides how allocations are counted and bounded unless ``allocator`` says (``"cuda"`` on CPU grads: the
    verdict the caching allocator's blocks would give).

    Upstream's side calls the function pinned at rank start (``megatron_state.pin_upstream``), never the module
    attribute: before anything runs, the attribute must still be that object with its pinned code and defaults, and
    after ``uninstall()`` it must be what it was before ``install()``; either difference is a problem of this rank.

    A subject that raises is reported as a problem of this rank rather than as a rank failure, so hypothesis can
    shrink the example without the pool being rebuilt for every try. If it raised on some ranks only, the others wait
    in a collective and the pool's timeout names them.
    """
    report = RankReport(rank=rank)
    pin = megatron_ranks.pinned_upstream()
    subject = subject_once(subject_ref)
    report.problems += [f"rank {rank}: {p}" for p in megatron_ranks.upstream_changes(pin)]
    fsdp_flag = megatron_ranks.upstream_fsdp_flag()
    megatron_ranks.require_tensor_parallel(tensor_parallel)
    config = _config_of(population)
    reference, report.upstream_raised, report.upstream_collectives, report.upstream_allocations = _expected_reference(
        population, rank, fsdp_flag, pin.upstream, config, measure_upstream, allocator
    )
    chunks = _build_chunks(population, rank, fsdp_flag)
    before = _snapshot(chunks)
    group, given = call_group(population)
    bound_before_install = megatron_ranks.bindings(pin)
    # install() is measured too: a buffer it allocates for the call to use is held during the call.
    tracker = AllocationTracker(_grads_device(chunks), allocator=allocator)
    try:
        with tracker:
            subject.install(budget_bytes=budget)
            with CollectiveRecorder(group) as recorder:
                subject.allreduce_non_tensor_model_parallel_grads(chunks, config, **given)
    except Exception as err:
        if report.upstream_raised and report.upstream_raised.startswith(f"{type(err).__name__}:"):
            # Upstream on this target raises on this step too (0.13 on a None grad): the subject does what Megatron
            # does; the case records it as a finding, never a red.
            report.raised_as_upstream = True
            return report
        report.problems.append(
            f"rank {rank}: the subject raised where upstream did not"
            + (f" (upstream raised {report.upstream_raised})" if report.upstream_raised else "")
            + f":\n{traceback.format_exc()}"
        )
        return report
    finally:
        subject.uninstall()
        report.problems += not_restored(rank, pin, bound_before_install)
    report.collectives = recorder.calls
    report.allocations = tracker.summary()
    if recorder.foreign_groups:
        report.problems.append(
            f"rank {rank}: {recorder.foreign_groups} all-reduce(s) on a group other than the TP group upstream uses "
            f"({GROUPS[population.group]})"
        )
    expected = _snapshot(reference)
    reduced_by_upstream = {
        key: value
        for key, (_, value, _) in expected.items()
        if value is not None and before[key][1] is not None and not torch.equal(bits(value), bits(before[key][1]))
    }
    truth = _Float64Truth(population, torch.distributed.get_process_group_ranks(group), reduced_by_upstream)
    _compare(report, reference, chunks, before, budget, bitwise, truth, _fsdp_labels(population, fsdp_flag))
    torch.distributed.barrier()
    report.peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return report


def _fsdp_labels(population: Population, fsdp_flag: str) -> dict[str, str]:
    """How a problem names a param of a chunk with FSDP on: with the flag and where its grad lives, which is what a
    subject that misreads the chunk's config gets wrong."""
    first_fsdp = len(population.chunks) - population.fsdp_chunks
    return {
        f"{c}:{spec.name}": f"{c}:{spec.name} (chunk {c} has {fsdp_flag} on: {FSDP_GRADS[fsdp_grads(fsdp_flag)]})"
        for c, chunk_specs in enumerate(population.chunks)
        if c >= first_fsdp
        for spec in chunk_specs
    }


class _Float64Truth(Mapping[str, tuple[torch.Tensor, torch.Tensor]]):
    """Per param upstream reduced (its result differs from the start in some bit): the exact reduction in float64 over
    the TP group's values, and the error bound allowed per element (flat, in logical order).

    Which params and which op come from what upstream did, not from a copy of its rules: a param is reduced when
    upstream's result changed it, with SUM or AVG, whichever exact result upstream's lies closer to; so a release that
    adds a rule is judged by its own behaviour. The bound is the classic one for summing ``n`` terms in any order,
    ``n * eps * sum(|x_i|)`` (plus one rounding of the result), with ``eps`` of the grad's dtype, taken element by
    element: any reduction order gloo picks must land inside it, and an element that is off cannot hide behind a
    large neighbour.

    A param's truth is computed when it is first looked up: only a result that differs from upstream's in some bit
    is judged by it, and most subjects reduce most params exactly as upstream does, so the float64 sums (a third of an
    example's work on the ranks) are skipped for them. Which params it holds is known at once.
    """

    def __init__(
        self, population: Population, group_ranks: list[int], reduced_by_upstream: dict[str, torch.Tensor]
    ) -> None:
        self._group_ranks = group_ranks
        self._seed = population.seed
        self._reduced = reduced_by_upstream
        self._specs: dict[str, tuple[FakeParameter, int]] = {}
        index = 0
        for c, chunk_specs in enumerate(population.chunks):
            for spec in chunk_specs:
                key = f"{c}:{spec.name}"
                if key in reduced_by_upstream:
                    self._specs[key] = (spec, index)
                index += 1
        self._computed: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def __getitem__(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        if key not in self._computed:
            spec, index = self._specs[key]
            total, magnitude = _sum_and_magnitude(spec, self._seed, self._group_ranks, index)
            result = self._reduced[key].double().reshape(-1)
            eps = torch.finfo(DTYPES[spec.dtype]).eps
            ranks = len(self._group_ranks)
            divisor = min((1, ranks), key=lambda d: float(torch.dist(result, total / d, p=1)))
            exact = total / divisor
            self._computed[key] = (exact, (ranks * eps / divisor) * magnitude + eps * exact.abs())
        return self._computed[key]

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def _sum_and_magnitude(
    spec: FakeParameter, seed: int, group_ranks: list[int], index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """In float64, the sum of the group's values of one grad and the sum of their magnitudes, element by element."""
    total = torch.zeros(spec.numel, dtype=torch.float64)
    magnitude = torch.zeros(spec.numel, dtype=torch.float64)
    for rank in group_ranks:
        terms = _generated(seed, rank, index, spec.numel, spec.dtype).double()
        total += terms
        magnitude += terms.abs()
    return total, magnitude


def _compare(
    report: RankReport,
    reference: list[torch.nn.Module],
    chunks: list[torch.nn.Module],
    before: dict,
    budget: int,
    bitwise: bool,
    truth: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    labels: dict[str, str],
) -> None:
    expected = _snapshot(reference)
    after = _snapshot(chunks)
    largest, smallest_element, promoted = 0, 8, None
    for key, (grad, value, address) in after.items():
        _, ref_value, _ = expected[key]
        start_grad, start_value, start_address = before[key]
        where = f"rank {report.rank}: param {labels.get(key, key)}"
        if value is None or ref_value is None:
            if (value is None) != (ref_value is None):
                report.problems.append(f"{where}: grad is None on one side only")
            continue
        if key in truth:
            largest = max(largest, value.numel() * value.element_size())
            smallest_element = min(smallest_element, value.element_size())
            promoted = value.dtype if promoted is None else torch.promote_types(promoted, value.dtype)
        if grad is not start_grad or address != start_address:
            report.problems.append(f"{where}: the grad object or its storage was replaced (upstream keeps both)")
        if torch.equal(bits(value), bits(ref_value)):
            continue
        diff = (value.double() - ref_value.double()).abs().max().item()
        if bitwise:
            report.problems.append(f"{where}: differs from upstream, max |diff| {diff:.3g}")
        else:
            report.non_bitwise_elements += int((value != ref_value).sum().item())
            flat = start_value.double().reshape(-1)
            exact, bound = truth.get(key, (flat, torch.zeros_like(flat)))
            errors = (value.double().reshape(-1) - exact).abs()
            over = (errors > bound).nonzero().flatten()
            if over.numel():
                at = int(over[(errors[over] - bound[over]).argmax()])
                report.problems.append(
                    f"{where}: {over.numel()} element(s) off the float64 reduction beyond "
                    f"their bound; element {at} by {errors[at].item():.3g} > {bound[at].item():.3g} "
                    f"(upstream differs by {diff:.3g})"
                )
        if torch.equal(bits(value), bits(start_value)) and not torch.equal(bits(ref_value), bits(start_value)):
            report.problems.append(f"{where}: left untouched where upstream reduced it")
    for _, size, element in report.collectives:
        bound = max(budget, largest) * element // smallest_element
        if size > bound:
            report.problems.append(
                f"rank {report.rank}: a coalesced buffer of {size} bytes exceeds max(budget {budget}, largest grad "
                f"{largest}) scaled by dtype promotion {element}/{smallest_element}"
            )
            break
    ops = sorted({op for op, _, _ in report.collectives})
    upstream_ops = sorted({op for op, _, _ in report.upstream_collectives})
    if ops != upstream_ops:
        report.op_choices.append(f"rank {report.rank}: reduce ops used {ops}, upstream uses {upstream_ops}")
    if report.allocations is not None:
        # The op's buffer gets the dtype all its grads promote to (bf16 with fp16 gives fp32, wider than either),
        # empty grads included: those change no value, so only the element size of upstream's own buffers shows them.
        widest_element = max(
            [1 if promoted is None else torch.empty((), dtype=promoted).element_size()]
            + [element for _, _, element in report.upstream_collectives]
        )
        smallest_element = min(smallest_element, widest_element)
        check_memory(report, budget, largest, widest_element, smallest_element, _grads_device(chunks))
