"""Contract: numerical equivalence. The subject's chunked all-reduce gives what upstream gives, on real ranks.

Upstream and subject run on identical fake model chunks in the same rank processes and process groups. Two ranks
(and two-rank TP groups inside four ranks) must match bitwise: a sum of two terms does not depend on order. With
four ranks in one TP group gloo's ring sums each element in an order that depends on its offset in the buffer, so
chunking may change the last bit; there both must stay within the float64 error bound (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import Phase, example, given, settings

from harness.contracts.allocations import AllocationSummary
from harness.contracts.equivalence import compare_task
from harness.contracts.gpt_step import gpt_finalize_task
from harness.contracts.population_strategies import equivalence_examples
from harness.contracts.populations import (
    GAPPED,
    LARGEST_BUFFER,
    LARGEST_BUFFER_BUDGET,
    LAYOUTS,
    MODEL_LIKE_BUDGET,
    Population,
    fsdp_grads,
    model_like_populations,
)
from harness.contracts.rank_report import RankReport
from harness.contracts.step_memory import finding as step_finding
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.ranks.early_start import ON_RANKS
from harness.ranks.megatron_state import (
    GTP_REMAT_GROUP_GETTER,
    finalize_module,
    has_gtp_remat,
    model_parallel,
    upstream_fsdp_flag,
)
from harness.ranks.placement import CUDA, resolve, skip_reason, this_machine
from harness.ranks.pool import get_pool
from harness.subjects.loading import SubjectRef
from harness.targets.installed_versions import installed_versions
from harness.targets.matrix import MEGATRON_DISTRIBUTION, Target
from harness.targets.megatron_names import UPSTREAM_NAME

FAMILY = family("equivalence")
pytestmark = FAMILY.mark()

# The last value is each shape's share of the hypothesis profile's examples (ci: 100, 50, 50; thorough: ten times).
SHAPES = [
    pytest.param(2, 2, True, 0.5, id="world2-tp2", marks=ON_RANKS),
    pytest.param(4, 2, True, 0.25, id="world4-tp2", marks=ON_RANKS),
    pytest.param(4, 4, False, 0.25, id="world4-tp4", marks=ON_RANKS),
]
FEWEST_EXAMPLES = 10
PLACEMENTS = ["gloo", "cuda-gloo", "nccl"]
"""Generated modules run on CPU tensors, on CUDA tensors with the ranks sharing the GPUs, and on NCCL
(:mod:`harness.ranks.placement`); the other cases on CPU tensors and on CUDA however the machine can."""
CPU_AND_CUDA = ["gloo", CUDA]


def fsdp_order() -> str:
    """Which chunks may have FSDP on for this target's upstream (see ``FSDP_ORDERS``): any trailing ones where each
    chunk's flag decides how its own grads are read (``use_megatron_fsdp``), all or none where the write-back reads
    an attribute only FSDP chunks' params have (``use_custom_fsdp``)."""
    return "trailing" if fsdp_grads(upstream_fsdp_flag()) == "sharded" else "all"


def group_kinds(world_size: int, tensor_parallel: int) -> tuple[str, ...]:
    """How the TP group may reach the call on this target and shape: as an argument only where upstream takes one
    (0.14 on), and as a group that is not parallel_state's only where the world has room for one."""
    upstream = getattr(finalize_module(), UPSTREAM_NAME)
    if "tp_group" not in inspect.signature(upstream).parameters:
        return ("implicit",)
    return ("implicit", "given", *(("other",) if world_size > tensor_parallel else ()))


def upstream_fallback(error: str, raised_too: bool = False) -> str:
    """How an expectation was taken when upstream itself raised (``None`` grads before the versions that skip them),
    and whether the subject raised as upstream does (what Megatron does on this target: a finding, never a red)."""
    if raised_too:
        return f"upstream raised {error}, and so did the subject, as Megatron does on this target"
    return f"upstream raised {error}; the expectation is upstream run without the parameters whose grad is None"


def placed(target: Target, name: str, world_size: int) -> str:
    """The placement ``name`` runs as on this machine; a skip naming the GPUs found and needed where it cannot run."""
    machine = this_machine()
    reason = skip_reason(name, world_size, machine)
    if reason:
        pytest.skip(contract_failure(target, FAMILY.name, f"{name} with {world_size} ranks cannot run here", reason))
    return resolve(name, world_size, machine).name


def rank_problems(reports: list[RankReport]) -> list[str]:
    """Every rank's problems, rank by rank: the detail lines of a red."""
    return [p for r in reports for p in r.problems]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize(("world_size", "tensor_parallel", "bitwise", "share"), SHAPES)
def test_matches_upstream_on_generated_modules(
    target: Target,
    subject_ref: SubjectRef,
    placement: str,
    world_size: int,
    tensor_parallel: int,
    bitwise: bool,
    share: float,
    report_dir: Path,
    record_finding: Callable[[str, str], None],
) -> None:
    placement = placed(target, placement, world_size)
    shape = f"world {world_size}, TP {tensor_parallel}, {placement}"
    differing = []
    raised: dict[str, int] = {}
    with model_parallel(get_pool(world_size, placement), tensor_parallel) as pool:

        def check(case: tuple[Population, int]) -> None:
            population, budget = case
            reports = pool.run(compare_task, population, subject_ref, budget, tensor_parallel, bitwise)
            upstream_raised = sorted({r.upstream_raised for r in reports if r.upstream_raised})
            raised_too = any(r.raised_as_upstream for r in reports)
            for error in upstream_raised:
                key = upstream_fallback(error, raised_too)
                raised[key] = raised.get(key, 0) + 1
            assert not any(r.problems for r in reports), contract_failure(
                target,
                FAMILY.name,
                f"{FAMILY.symbol} against upstream ({shape}, budget {budget} bytes)",
                rank_problems(reports) + [upstream_fallback(error) for error in upstream_raised],
            )
            differing.append(sum(r.non_bitwise_elements for r in reports))

        groups, fsdp = group_kinds(world_size, tensor_parallel), fsdp_order()
        check = given(equivalence_examples(groups, fsdp))(check)
        for population in model_like_populations(fsdp, groups):
            check = example((population, MODEL_LIKE_BUDGET))(check)
        check = settings(max_examples=max(FEWEST_EXAMPLES, round(settings.default.max_examples * share)))(check)
        try:
            check()
        finally:
            for words, count in raised.items():
                record_finding(FAMILY.name, f"{shape}: {words} ({count} example(s))")
    if not bitwise:
        name = f"equivalence_world{world_size}_tp{tensor_parallel}_{placement}.json"
        (report_dir / name).write_text(
            json.dumps({"examples": len(differing), "examples_not_bitwise": sum(1 for d in differing if d)}, indent=2)
        )


@pytest.mark.advisory
def test_matches_upstream_on_grads_with_gaps(target: Target, subject_ref: SubjectRef) -> None:
    """Grads laid out with gaps (every other element of a larger buffer): no Megatron path hands such a grad over, so
    a subject that reduces one wrong breaks nothing Megatron computes; upstream's copy reduces it right, and so
    should an adapter that may one day meet a framework's own grads. The example that fails is reported as drawn:
    shrinking re-runs a rank task per step (a minute and more), and an advisory's example only has to show the
    layout."""
    with model_parallel(get_pool(2, "gloo"), 2) as pool:

        @given(equivalence_examples(layouts=(*LAYOUTS, GAPPED)))
        @settings(max_examples=FEWEST_EXAMPLES, phases=(Phase.explicit, Phase.reuse, Phase.generate))
        def check(case: tuple[Population, int]) -> None:
            population, budget = case
            reports = pool.run(compare_task, population, subject_ref, budget, 2, True)
            assert not any(r.problems for r in reports), contract_failure(
                target,
                FAMILY.name,
                f"{FAMILY.symbol} against upstream on grads with gaps (world 2, TP 2, gloo, budget {budget} bytes)",
                rank_problems(reports),
            )

        check()


@ON_RANKS
@pytest.mark.parametrize("placement", CPU_AND_CUDA)
def test_largest_buffer_is_bounded_by_the_budget(
    target: Target,
    subject_ref: SubjectRef,
    placement: str,
    report_dir: Path,
    record_finding: Callable[[str, str], None],
) -> None:
    """4 MiB of sequence-parallel fp32 grads, 16 KiB each, under a 64 KiB budget: the subject's largest message stays
    within the budget, and the memory it holds at once within the bound (8 chunks: 512 KiB, an eighth of what a design
    holding every grad at once needs; on CUDA counted in the caching allocator's blocks). ``equivalence_memory.json``
    (``equivalence_memory_cuda.json`` on CUDA) records both sides' messages and allocations and, under ``finding``,
    whether upstream itself needs the patch for memory on this target."""
    budget = LARGEST_BUFFER_BUDGET
    placement = placed(target, placement, 2)
    with model_parallel(get_pool(2, placement), 2) as pool:
        reports = pool.run(compare_task, LARGEST_BUFFER, subject_ref, budget, 2, True, measure_upstream=True)
    total = sum(spec.numel * 4 for spec in LARGEST_BUFFER.chunks[0])
    first = reports[0]
    ours = max((size for _, size, _ in first.collectives), default=0)
    theirs = max((size for _, size, _ in first.upstream_collectives), default=0)
    memory = {
        "grad_bytes": total,
        "budget_bytes": budget,
        "subject_largest_buffer_bytes": ours,
        "subject_collectives": len(first.collectives),
        "upstream_largest_buffer_bytes": theirs,
        "upstream_collectives": len(first.upstream_collectives),
        "rank_peak_rss_kib": [r.peak_rss_kib for r in reports],
        "memory_bound_bytes": first.memory_bound_bytes,
        "subject_peak_allocated_bytes": _peak(first.allocations),
        "subject_largest_allocation_bytes": _largest(first.allocations),
        "upstream_peak_allocated_bytes": _peak(first.upstream_allocations),
        "upstream_largest_allocation_bytes": _largest(first.upstream_allocations),
        "finding": _memory_finding(first, total),
        "placement": placement,
    }
    on_cuda = placement != "gloo"
    (report_dir / f"equivalence_memory{'_cuda' if on_cuda else ''}.json").write_text(json.dumps(memory, indent=2))
    record_finding(FAMILY.name, f"on CUDA ({placement}): {memory['finding']}" if on_cuda else memory["finding"])
    assert not any(r.problems for r in reports), contract_failure(
        target,
        FAMILY.name,
        f"{FAMILY.symbol} against upstream (world 2, TP 2, {placement}, budget {budget} bytes)",
        rank_problems(reports),
    )
    assert ours <= budget, contract_failure(
        target,
        FAMILY.name,
        f"memory property of {FAMILY.symbol}",
        f"largest coalesced buffer {ours} bytes > budget {budget}",
    )


def _peak(summary: AllocationSummary | None) -> int | None:
    return None if summary is None else summary.peak_bytes


def _largest(summary: AllocationSummary | None) -> int | None:
    return None if summary is None else summary.largest_bytes


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % (scale // 4) == 0:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} bytes"


def _memory_finding(report: RankReport, grad_bytes: int) -> str:
    """One line about the largest-buffer population, not a training step (the real step's finding is the GPT case's):
    does upstream's call on this target hold more than a chunked all-reduce may?"""
    version = installed_versions().get(MEGATRON_DISTRIBUTION) or "(version unknown)"
    upstream, subject = report.upstream_allocations, report.allocations
    population = f"the largest-buffer population ({_size(grad_bytes)} of sequence-parallel grads)"
    if upstream is None:
        return f"megatron-core {version}: upstream's allocations were not measured"
    if upstream.peak_bytes <= report.memory_bound_bytes:
        return (
            f"megatron-core {version} chunks {population} on its own (peak {upstream.peak_bytes} bytes, within the "
            f"{report.memory_bound_bytes}-byte bound)"
        )
    how = (
        "coalesces all of it into one buffer"
        if upstream.largest_bytes >= grad_bytes
        else f"holds {upstream.peak_bytes} bytes of it at once"
    )
    if subject is None:
        return f"megatron-core {version}, {population}: upstream {how}; the subject's peak was not measured (it raised)"
    return (
        f"megatron-core {version}, {population}: upstream {how} (peak {upstream.peak_bytes} bytes), the subject's "
        f"call peaks at {subject.peak_bytes}"
    )


@ON_RANKS
@pytest.mark.advisory
def test_reduces_with_upstreams_ops(target: Target, subject_ref: SubjectRef) -> None:
    """Values decide equivalence: a subject that averages by a SUM and a division of its own, with values equal to
    upstream's (the generated-modules case holds it to that), is a style, not a break. Checked on the model-like
    examples, where upstream uses every op it has."""
    choices: list[str] = []
    fsdp, groups = fsdp_order(), group_kinds(2, 2)
    with model_parallel(get_pool(2, "gloo"), 2) as pool:
        for population in model_like_populations(fsdp, groups):
            reports = pool.run(compare_task, population, subject_ref, MODEL_LIKE_BUDGET, 2, True)
            choices += [c for r in reports for c in r.op_choices]
    assert not choices, contract_failure(
        target,
        FAMILY.name,
        f"{FAMILY.symbol}: reduce ops (world 2, TP 2, gloo; the values matched upstream's)",
        sorted(set(choices)),
    )


@ON_RANKS
@pytest.mark.parametrize("placement", CPU_AND_CUDA)
@pytest.mark.parametrize("qk_layernorm", [False, True], ids=["plain", "qk-layernorm"])
def test_finalize_model_grads_on_a_real_gpt_model(
    target: Target,
    subject_ref: SubjectRef,
    qk_layernorm: bool,
    placement: str,
    record_finding: Callable[[str, str], None],
) -> None:
    """The step as training takes it, TP 2 + sequence parallel; the plain model on CPU grads also answers, for this
    target, whether the patch is still needed and enough (both step peaks, and every coalesced reduction of the step
    the subject leaves unbounded: a finding)."""
    budget = 64
    placement = placed(target, placement, 2)
    with model_parallel(get_pool(2, placement), 2) as pool:
        reports = pool.run(gpt_finalize_task, subject_ref, budget, qk_layernorm)
    if not qk_layernorm:
        _record_step_finding(record_finding, f"GPTModel TP 2 + SP, world 2, {placement}", reports)
    assert not any(r.problems for r in reports), contract_failure(
        target,
        FAMILY.name,
        f"{FAMILY.symbol} against upstream (GPTModel TP 2 + SP, world 2, {placement}, budget {budget} bytes)",
        rank_problems(reports),
    )


@ON_RANKS
def test_finalize_model_grads_with_gtp_remat(
    target: Target, subject_ref: SubjectRef, record_finding: Callable[[str, str], None]
) -> None:
    """From 0.19 ``finalize_model_grads`` also reduces every replicated grad over the GTP weight-remat group, in one
    coalesced buffer of its own, when that group has more than one rank. The same step with a two-rank group there
    (parallel_state's getter answers the TP group: the weights themselves are not GTP-sharded, which needs gathers
    this CPU path cannot take): equal to upstream's with the subject installed, and the finding says what that
    reduction holds under the subject."""
    if not has_gtp_remat():
        version = installed_versions().get(MEGATRON_DISTRIBUTION)
        missing = f"megatron-core {version} has no GTP weight-remat axis (parallel_state.{GTP_REMAT_GROUP_GETTER})"
        pytest.skip(contract_failure(target, FAMILY.name, "the step with a GTP weight-remat group cannot run", missing))
    budget = 64
    with model_parallel(get_pool(2, "gloo"), 2) as pool:
        reports = pool.run(gpt_finalize_task, subject_ref, budget, False, gtp_remat=True)
    shape = "GPTModel TP 2 + SP, a GTP weight-remat group of 2, world 2, gloo"
    _record_step_finding(record_finding, shape, reports)
    assert not any(r.problems for r in reports), contract_failure(
        target,
        FAMILY.name,
        f"{FAMILY.symbol} against upstream ({shape}, budget {budget} bytes)",
        rank_problems(reports),
    )


def _record_step_finding(record: Callable[[str, str], None], configuration: str, reports: list[RankReport]) -> None:
    steps = [r.step for r in reports if r.step is not None]
    if len(steps) == len(reports) and all(s.subject_peak_bytes or s.upstream_peak_bytes for s in steps):
        version = installed_versions().get(MEGATRON_DISTRIBUTION) or "(version unknown)"
        record(FAMILY.name, step_finding(configuration, version, steps))
