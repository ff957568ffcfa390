"""The environment variables that choose what a target session checks, and the prefix a repro line needs.

The noxfile, the plugin, the repro line of every red and the report's rebuilt repro lines all read these; a repro
line that leaves one out replays another run than the one that went red, so the choice of what to put in it lives
here too.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import REPO_ROOT

SUBJECT_ENV_VAR = "MEGATRON_CONFORMANCE_SUBJECT"
"""The subject: a dotted module, a ``.py`` path or a declaration file (``--subject`` wins over it)."""

MATRIX_ENV_VAR = "MEGATRON_CONFORMANCE_MATRIX"
"""The matrix file that defines the targets (a candidate's is generated under ``reports/candidate/``)."""

TARGET_ENV_VAR = "MEGATRON_CONFORMANCE_TARGET"
"""The target session in force, for the case command run by hand (``--target`` wins over it)."""

REPORTS_ENV_VAR = "MEGATRON_CONFORMANCE_REPORTS"
"""Where sessions write their reports (default: ``reports/`` of the checkout; the installed command points it at the
framework's own ``reports/``)."""

ENVDIR_ENV_VAR = "MEGATRON_CONFORMANCE_ENVDIR"
"""Where nox builds the target venvs (default: ``.nox/`` of the checkout; the installed command points it at the
framework's own checkout, never at the installed gate)."""

LAUNCHER_ENV_VAR = "MEGATRON_CONFORMANCE_LAUNCHER"
"""The command a repro line starts with: ``nox`` in a checkout of the gate, ``megatron-conformance`` where the gate is
installed (the command sets it for the sessions it runs)."""

REFERENCE_SUBJECT = "harness.reference"
"""The subject when none is named: the built-in reference adapter."""

DEFAULT_MATRIX = REPO_ROOT / "matrix.yaml"


def is_default_matrix(matrix: str | Path) -> bool:
    """Whether ``matrix`` is the checkout's own ``matrix.yaml`` (a repro line and a summary need not name it)."""
    return Path(matrix).resolve() == DEFAULT_MATRIX.resolve()


def repro_environment(subject: str | None, matrix: str | Path | None) -> dict[str, str]:
    """The assignments a repro line puts before ``nox``: the subject unless it is the reference, the matrix unless it
    is the checkout's own."""
    environment = {}
    if subject and subject != REFERENCE_SUBJECT:
        environment[SUBJECT_ENV_VAR] = subject
    if matrix and not is_default_matrix(matrix):
        environment[MATRIX_ENV_VAR] = str(matrix)
    return environment


def launcher() -> str:
    """The command that runs the gate's sessions here: what every repro line starts with."""
    return os.environ.get(LAUNCHER_ENV_VAR) or "nox"
