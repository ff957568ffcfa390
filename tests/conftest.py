"""One seed for every random draw of a test run: ``--hypothesis-seed`` when given, else a fresh one, chosen once by
the controller, handed to xdist's workers, and printed in the header, so a red replays with it."""

from __future__ import annotations

import random
from typing import Any

import pytest

_WORKER_KEY = "megatron_conformance_seed"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before hypothesis' own plugin reads the option (it seeds every test that is not derandomized with it)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.option.hypothesis_seed = workerinput[_WORKER_KEY]
    elif config.getoption("hypothesis_seed", default=None) is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[_WORKER_KEY] = node.config.option.hypothesis_seed


def pytest_report_header(config: pytest.Config) -> str:
    chosen = config.getoption("hypothesis_seed")
    return f"random draws: seed {chosen} (replay this run's draws with: --hypothesis-seed {chosen})"


@pytest.fixture(scope="session")
def run_seed(pytestconfig: pytest.Config) -> int:
    """This run's seed for the strategies' random draws (``tests/strategy_draws.py``)."""
    return int(pytestconfig.getoption("hypothesis_seed"))
