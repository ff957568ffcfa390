"""The import-side-effects family's watch over a whole target session: Megatron's callables must be the same after every
case as before the first one.

A subject that patches lazily -- on the first call of one of its functions, from a timer, from a hook -- passes every
check that only observes its import and ``install()``. This pytest plugin (loaded by the case command with
``-p harness.contracts.import_side_effects.session_watch``) captures the functions and classes of Megatron and
``torch.distributed`` before the first case, compares them after each case's teardown, and turns the first case after
which they differ red, naming what changed. Cases that patch on purpose restore before their teardown ends
(``install()``/``uninstall()`` inside a ``try``), so they leave nothing to see. Data globals are not compared:
Megatron rebinds its process-group globals whenever model parallelism is set up.
"""

from __future__ import annotations

import importlib
from collections.abc import Generator
from typing import Any

import pytest

from harness.contracts.import_side_effects.callable_state import (
    CallableState,
    callable_state_changes,
    capture_callable_state,
)
from harness.plugin.blockers import BLOCKERS
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.plugin.session_state import configured_target
from harness.targets.megatron_names import FINALIZE_MODULE

WATCHED = ("megatron", "torch.distributed")
PRELOADED = ("megatron.core", FINALIZE_MODULE, "torch.distributed")
"""Imported once collection is done, before the first capture, so their first import during a case is not taken for
a change; their import (seconds) then counts as start-up, not as the first case's setup."""

_FAMILY = family("import-side-effects")
_BASELINE = pytest.StashKey[CallableState]()
_REPORTED = pytest.StashKey[bool]()
_CASE_FAILED = pytest.StashKey[bool]()


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
    if call.when != "teardown" or config.stash.get(_REPORTED, False) or _BASELINE not in config.stash:
        return
    current = capture_callable_state(WATCHED)
    if item.stash.get(_CASE_FAILED, False):
        # A red case may leave Megatron patched (an install() check that failed before uninstall()); that is its own
        # red, so the watch starts again from here instead of blaming the next case.
        config.stash[_BASELINE] = current
        return
    changes = callable_state_changes(config.stash[_BASELINE], current)
    if not changes:
        return
    config.stash[_REPORTED] = True
    message = contract_failure(
        configured_target(config),
        _FAMILY.name,
        f"Megatron's functions differ from before the first case, first seen after {item.nodeid}",
        [str(change) for change in changes],
    )
    failed = pytest.CallInfo.from_call(lambda: _raise(AssertionError(message)), when="teardown")
    outcome.force_result(pytest.TestReport.from_item_and_call(item, failed))


def _raise(error: BaseException) -> None:
    raise error
