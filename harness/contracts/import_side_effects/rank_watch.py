"""The session watch inside the rank processes, where the subject's replacement runs.

Each rank takes its baseline when it starts (a :data:`~harness.ranks.pool.RANK_START_HOOKS` entry, registered by the
session watch), and :func:`changes_task`, run on a pool after each case on ranks, answers what differs since then and
takes the current state as the next baseline, so each change is told once, after the case that made it. A module a
task imported for the first time joins the baseline without being a change.
"""

from __future__ import annotations

from harness.contracts.import_side_effects.callable_state import (
    CallableState,
    callable_state_changes,
    capture_callable_state,
)

WATCHED = ("megatron", "torch.distributed")

_baseline: list[CallableState] = []


def take_baseline(rank: int, world_size: int) -> None:
    """Rank start: what Megatron's and ``torch.distributed``'s callables are before any task runs."""
    _baseline[:] = [capture_callable_state(WATCHED)]


def changes_task(rank: int, world_size: int) -> list[str]:
    """What changed in this rank since its baseline (``rank r: kind name: detail`` lines), the baseline then moved
    to now."""
    current = capture_callable_state(WATCHED, since=_baseline[0] if _baseline else None)
    if not _baseline:
        _baseline.append(current)
        return []
    changes = callable_state_changes(_baseline[0], current)
    _baseline[0] = current
    return [f"rank {rank}: {change.kind} {change.name}: {change.detail}" for change in changes]
