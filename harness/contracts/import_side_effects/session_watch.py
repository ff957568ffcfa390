"""The import-side-effects family's watch over a whole target session: after every case, Megatron's and
``torch.distributed``'s callables are what they were before it, in the gate's process and in the rank processes.

A subject that patches lazily -- on the first call of one of its functions, from a timer, from a hook, inside a rank
where its replacement runs -- passes every check that only observes its import and ``install()``. This pytest plugin
(loaded by the case command with ``-p harness.contracts.import_side_effects.session_watch``) compares, after each
case's teardown, the functions, their code and defaults, and the methods bound on the classes of Megatron and
``torch.distributed`` with what they were after the case before, and turns every case after which they differ red,
naming what changed; the state after it is the next case's baseline, so every change is told once, with the case that
made it, and a module imported during a case is watched from then on. The rank processes of the session's pools do
the same (:mod:`~harness.contracts.import_side_effects.rank_watch`) after every case on ranks. Cases that patch on
purpose restore before their teardown ends (``install()``/``uninstall()`` inside a ``try``), so they leave nothing to
see; a case that is red already is its own report. Data globals are not compared: Megatron rebinds its process-group
globals whenever model parallelism is set up.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Generator
from typing import Any

import pytest

from harness.contracts.import_side_effects import rank_watch
from harness.contracts.import_side_effects.callable_state import (
    CallableState,
    callable_state_changes,
    capture_callable_state,
)
from harness.plugin.blockers import BLOCKERS
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.plugin.session_state import configured_target
from harness.ranks.early_start import runs_on_ranks
from harness.ranks.pool import RANK_START_HOOKS, RankPool, RankPoolError, cached_pools
from harness.targets.megatron_names import FINALIZE_MODULE

WATCHED = rank_watch.WATCHED
PRELOADED = ("megatron.core", FINALIZE_MODULE, "torch.distributed")
"""Imported once collection is done, before the first capture, so their first import during a case is not taken for
a change; their import (seconds) then counts as start-up, not as the first case's setup."""
_RANK_WATCH_TIMEOUT_S = 60.0

_FAMILY = family("import-side-effects")
_BASELINE = pytest.StashKey[CallableState]()
_CASE_FAILED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    if rank_watch.take_baseline not in RANK_START_HOOKS:
        RANK_START_HOOKS.append(rank_watch.take_baseline)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.stash.get(BLOCKERS, []):
        return  # a Megatron that cannot be imported is already a red of every family (harness.plugin.blockers)
    for name in PRELOADED:
        importlib.import_module(name)


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    config = item.config
    if _BASELINE not in config.stash:
        config.stash[_BASELINE] = capture_callable_state(WATCHED)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    config = item.config
    if report.failed:
        item.stash[_CASE_FAILED] = True
    if call.when != "teardown" or _BASELINE not in config.stash:
        return
    current = capture_callable_state(WATCHED, since=config.stash[_BASELINE])
    changes = [str(change) for change in callable_state_changes(config.stash[_BASELINE], current)]
    config.stash[_BASELINE] = current
    if runs_on_ranks(item):
        changes += _rank_changes()
    if not changes or item.stash.get(_CASE_FAILED, False):
        # A red case may leave Megatron patched (an install() check that failed before uninstall()); that is its own
        # red, and the next case starts from the state it left.
        return
    message = contract_failure(
        configured_target(config),
        _FAMILY.name,
        f"Megatron's functions or classes changed during {item.nodeid}",
        changes,
    )
    failed = pytest.CallInfo.from_call(lambda: _raise(AssertionError(message)), when="teardown")
    outcome.force_result(pytest.TestReport.from_item_and_call(item, failed))


_looked_at: weakref.WeakKeyDictionary[RankPool, int] = weakref.WeakKeyDictionary()
"""Each pool's task count after the last look: a pool no task reached since then ran no code in its ranks, so it
is not asked (each look at a pool's four ranks is a capture in each of them)."""


def _rank_changes() -> list[str]:
    """What changed in the rank processes of this process's pools since the last look; a pool that cannot answer
    (a case left it broken) is that case's own red, and it restarts with a fresh baseline."""
    changes = []
    for pool in cached_pools():
        if _looked_at.get(pool) == pool.tasks_sent:
            continue
        try:
            changes += [
                line for rank in pool.run(rank_watch.changes_task, timeout_s=_RANK_WATCH_TIMEOUT_S) for line in rank
            ]
        except RankPoolError:
            continue
        finally:
            _looked_at[pool] = pool.tasks_sent
    return changes


def _raise(error: BaseException) -> None:
    raise error
