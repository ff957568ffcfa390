"""Hypothesis profiles shared by the cases and the harness tests.

``ci`` is derandomized (a red in CI replays identically on a laptop), has no deadline (shared 2-core machines make
per-example timing meaningless) and prints the ``@reproduce_failure`` blob; ``dev`` is quicker, ``thorough`` digs.
``ci`` and ``dev`` shrink a red fully but skip hypothesis' explain phase, which re-runs the minimal example under a
line tracer to annotate which arguments mattered: on a rank task that is a slow re-run for a comment; ``thorough``
keeps it.
``fail-fast`` is ``ci`` without shrinking: the sensitivity session only needs to know that a mutant turns a case red,
and shrinking an example that fails on every draw re-runs a rank task dozens of times. ``soak`` is ``dev`` without an
example database: each run of the soak (:mod:`harness.sensitivity.soak`) draws only from its own seed.

An advisory that fails is a finding, not a red: it keeps its repro line and the example that failed, but is neither
shrunk nor explained (:func:`advisory_settings`). Shrinking a failing advisory, and hypothesis' explain phase that
traces every line of each re-run after it, cost a provider wrapper that fails two advisories about a minute per
target; a red keeps full shrinking, its minimal example being what a user debugs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.configuration import set_hypothesis_home_dir

from harness.formats.environment import ENVDIR_ENV_VAR

_UNEXPLAINED = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""Every phase but explain: a red's example is shrunk to its minimum, then not traced line by line again."""
_PROFILES = {
    "ci": {"max_examples": 200, "derandomize": True, "phases": _UNEXPLAINED},
    "dev": {"max_examples": 50, "phases": _UNEXPLAINED},
    "thorough": {"max_examples": 2000},
    "fail-fast": {"max_examples": 200, "derandomize": True, "phases": (Phase.explicit, Phase.generate)},
    "soak": {"max_examples": 50, "phases": _UNEXPLAINED, "database": None},
}


def register() -> None:
    """Register the profiles; must run before hypothesis' own plugin reads ``--hypothesis-profile``. Where the venvs
    live in a framework's checkout (the installed command), hypothesis' example database lives beside them, not in
    the installed gate's directory that the cases run from."""
    envdir = os.environ.get(ENVDIR_ENV_VAR)
    if envdir:
        set_hypothesis_home_dir(Path(envdir) / ".hypothesis")
    for name, options in _PROFILES.items():
        settings.register_profile(
            name,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            **options,
        )


def load_default(config: pytest.Config) -> None:
    """Load ``ci`` under ``CI=true``, else ``dev``, unless ``--hypothesis-profile`` chose one."""
    if not config.getoption("hypothesis_profile", default=None):
        settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


_SETTINGS_ATTRIBUTE = "_hypothesis_internal_use_settings"
"""Where ``@given`` keeps the settings it reads on each call (what ``@settings`` sets)."""
ADVISORY_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)
"""What a hypothesis case that would be recorded as an advisory runs: everything up to its first failing example."""


@contextmanager
def advisory_settings(test: object) -> Iterator[None]:
    """Run the hypothesis ``test`` (a ``@given`` function) with :data:`ADVISORY_PHASES` for the block, its own
    settings otherwise kept; the function is shared by every item of it, so its settings are put back after."""
    current = getattr(test, _SETTINGS_ATTRIBUTE, None)
    if not getattr(test, "is_hypothesis_test", False) or current is None:
        yield
        return
    phases = tuple(phase for phase in current.phases if phase in ADVISORY_PHASES)
    setattr(test, _SETTINGS_ATTRIBUTE, settings(current, phases=phases))
    try:
        yield
    finally:
        setattr(test, _SETTINGS_ATTRIBUTE, current)
