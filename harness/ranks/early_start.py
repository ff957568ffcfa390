"""The fork server of the rank pools, started as early as a session knows it will need one.

Cases that run on ranks carry :data:`ON_RANKS`. Under xdist (``--dist loadgroup``) they all go to one worker, so one
fork server, with torch and Megatron imported once, serves them all. Where the session runs its cases in this very
process, the server is started as soon as collection has found such a case: its imports (seconds of CPU) then run on
another core beside the cases that come first, instead of inside the first case on ranks.

Loaded with ``-p harness.ranks.early_start`` by the case command (:mod:`harness.plugin.command`).
"""

from __future__ import annotations

import pytest

from harness.ranks.fork_server import start_fork_server

RANKS_GROUP = "ranks"
ON_RANKS = pytest.mark.xdist_group(RANKS_GROUP)
"""The mark of a case that runs tasks on a rank pool (or forks from its fork server)."""


def runs_on_ranks(item: pytest.Item) -> bool:
    """Whether ``item`` carries :data:`ON_RANKS`."""
    return any(mark.args[:1] == (RANKS_GROUP,) for mark in item.iter_markers("xdist_group"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Once deselection is done, and before the gate imports Megatron (its hook is also trylast, and this plugin is
    # registered after it, so this one runs first): the server's imports then overlap this process's own.
    # An xdist worker collects every case but runs only its share, known case by case: its pools start lazily.
    if hasattr(config, "workerinput"):
        return
    if any(runs_on_ranks(item) for item in items):
        start_fork_server()
