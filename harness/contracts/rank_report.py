"""What one rank of an equivalence or GPT-step comparison saw, and the judgement of its memory.

The report has a home of its own so that the tracker (:mod:`harness.contracts.allocations`), the step's memory
(:mod:`harness.contracts.step_memory`) and the comparisons that fill it (:mod:`harness.contracts.equivalence`,
:mod:`harness.contracts.gpt_step`) all point at it and none points back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.contracts.allocations import MEMORY_BOUND_CHUNKS, AllocationSummary, memory_bound
from harness.contracts.step_memory import StepMemory


@dataclass
class RankReport:
    """What one rank saw; empty ``problems`` means the subject matched upstream on this rank."""

    rank: int
    problems: list[str] = field(default_factory=list)
    collectives: list[tuple[str, int, int]] = field(default_factory=list)
    upstream_collectives: list[tuple[str, int, int]] = field(default_factory=list)
    non_bitwise_elements: int = 0
    upstream_raised: str | None = None
    raised_as_upstream: bool = False
    """The subject raised the exception upstream raises on this step on this target: what Megatron does."""
    peak_rss_kib: int = 0
    allocations: AllocationSummary | None = None
    upstream_allocations: AllocationSummary | None = None
    memory_bound_bytes: int = 0
    op_choices: list[str] = field(default_factory=list)
    """Where the subject reduced with other ops than upstream (SUM then a division for AVG, say) and its values still
    matched: an advisory, since values decide equivalence."""
    step: StepMemory | None = None
    """On a real GPT step: both steps' memory and the coalesced reductions in it
    (:mod:`harness.contracts.step_memory`)."""


def check_memory(
    report: RankReport, budget: int, largest: int, widest: int, smallest: int, device: torch.device
) -> None:
    """Judge the peak the tracker saw against the memory bound, and every buffer's device against the grads'; what
    exceeds either becomes a problem line of ``report``."""
    summary = report.allocations
    assert summary is not None
    chunk, report.memory_bound_bytes = memory_bound(budget, largest, widest, smallest, summary.allocator)
    if summary.peak_bytes > report.memory_bound_bytes:
        cuda = "" if summary.cuda_peak_bytes is None else f", CUDA allocator peak {summary.cuda_peak_bytes}"
        blocks = " as a CUDA allocator block" if summary.allocator == "cuda" else ""
        report.problems.append(
            f"rank {report.rank}: the subject held {summary.peak_bytes} bytes of tensors it allocated at once "
            f"(largest {summary.largest_bytes}, {summary.count} allocations of {summary.total_bytes} bytes in all"
            f"{cuda}) > {report.memory_bound_bytes} bytes = {MEMORY_BOUND_CHUNKS} x max(budget {budget}, largest "
            f"grad {largest}) x dtype promotion {widest}/{smallest} ({chunk}{blocks}): its memory grows with the "
            "grads, not with the budget"
        )
    for allocation in summary.on_other_devices(device)[:3]:
        made, grads = torch.device(allocation.device), torch.device(device)
        where = (made.type, grads.type) if made.type != grads.type else (str(made), str(grads))
        report.problems.append(
            f"rank {report.rank}: the subject created a {where[0]} buffer for {where[1]} grads "
            f"({allocation.op}, {allocation.nbytes} bytes)"
        )
