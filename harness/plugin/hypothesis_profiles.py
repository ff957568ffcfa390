"""Hypothesis profiles shared by the cases and the harness tests.

``ci`` is derandomized (a red in CI replays identically on a laptop), has no deadline (shared 2-core machines make
per-example timing meaningless) and prints the ``@reproduce_failure`` blob; ``dev`` is quicker, ``thorough`` digs.
``fail-fast`` is ``ci`` without shrinking: the sensitivity session only needs to know that a mutant turns a case red,
and shrinking an example that fails on every draw re-runs a rank task dozens of times.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.configuration import set_hypothesis_home_dir

from harness.formats.environment import ENVDIR_ENV_VAR

_PROFILES = {
    "ci": {"max_examples": 200, "derandomize": True},
    "dev": {"max_examples": 50},
    "thorough": {"max_examples": 2000},
    "fail-fast": {"max_examples": 200, "derandomize": True, "phases": (Phase.explicit, Phase.generate)},
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
