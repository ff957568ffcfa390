"""The environment variables that choose what a target session checks, and the prefix a repro line needs.

The noxfile, the plugin, the repro line of every red and the report's rebuilt repro lines all read these; a repro
line that leaves one out replays another run than the one that went red, so the choice of what to put in it lives
here too.
"""

from __future__ import annotations

from pathlib import Path

from harness import REPO_ROOT

SUBJECT_ENV_VAR = "MEGATRON_CONFORMANCE_SUBJECT"
"""The subject: a dotted module, a ``.py`` path or a declaration file (``--subject`` wins over it)."""

MATRIX_ENV_VAR = "MEGATRON_CONFORMANCE_MATRIX"
"""The matrix file that defines the targets (a candidate's is generated under ``reports/candidate/``)."""

TARGET_ENV_VAR = "MEGATRON_CONFORMANCE_TARGET"
"""The target session in force, for the case command run by hand (``--target`` wins over it)."""

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
