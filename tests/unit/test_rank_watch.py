"""The session watch asks a rank pool what changed in its ranks only when a task ran there since it last asked: a
change a task makes in the ranks is told after that case, and a pool no task reached is not made to capture again.

Real pools (one rank each, gloo, torch only): the watch's capture of ``torch.distributed`` in the ranks is the one a
target session runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.contracts.import_side_effects import rank_watch, session_watch
from harness.ranks.pool import RANK_START_HOOKS, RankPool, close_all_pools, get_pool
from tests import rank_tasks


@pytest.fixture
def watched_pools() -> Iterator[tuple[RankPool, RankPool]]:
    """Two cached pools whose ranks take the watch's baseline when they start, as in a target session; closed after,
    since a rank of one keeps the patch a test makes."""
    close_all_pools()
    RANK_START_HOOKS.append(rank_watch.take_baseline)
    try:
        used, idle = get_pool(1), get_pool(1, rank_setup=rank_tasks.mark_env)
        used.run(rank_tasks.identify)
        idle.run(rank_tasks.identify)
        assert session_watch._rank_changes() == []
        yield used, idle
    finally:
        RANK_START_HOOKS.remove(rank_watch.take_baseline)
        close_all_pools()


def test_a_change_made_in_the_ranks_is_told_and_an_untouched_pool_is_not_asked(
    watched_pools: tuple[RankPool, RankPool],
) -> None:
    used, idle = watched_pools
    used.run(rank_tasks.rebind_barrier)
    sent_to_idle = idle.tasks_sent
    changes = session_watch._rank_changes()
    assert len(changes) == 1 and changes[0].startswith("rank 0: ") and "torch.distributed.barrier" in changes[0]
    assert idle.tasks_sent == sent_to_idle, "a pool no task reached since the last look was asked again"
    assert session_watch._rank_changes() == [], "a change is told once"


def test_a_pool_is_asked_again_once_a_task_reaches_it(watched_pools: tuple[RankPool, RankPool]) -> None:
    _, idle = watched_pools
    idle.run(rank_tasks.rebind_barrier)
    changes = session_watch._rank_changes()
    assert len(changes) == 1 and "torch.distributed.barrier" in changes[0], changes
