"""What a target session has in force (target, matrix, subject, report directory), kept in pytest's config stash.

The gate plugin fills it at configure time (the only code that sets the stash keys); the other plugins of a session
(the session watch), the case files and the gate's own hooks read it through these functions.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from harness import REPO_ROOT
from harness.subjects.declaration import Declaration
from harness.subjects.loading import SubjectRef, resolve_subject
from harness.targets.matrix import Matrix, Target

MATRIX = pytest.StashKey[Matrix]()
TARGET = pytest.StashKey[Target]()
SUBJECT_REF = pytest.StashKey[SubjectRef]()
SUBJECT = pytest.StashKey[ModuleType]()


def configured_target(config: pytest.Config) -> Target:
    """The target in force."""
    return config.stash[TARGET]


def configured_matrix(config: pytest.Config) -> Matrix:
    """The matrix that defines the target in force."""
    return config.stash[MATRIX]


def subject_ref_of(config: pytest.Config) -> SubjectRef:
    """The subject as this session names it (``--subject``, else the environment, else the reference subject),
    resolved once per process; rank processes receive it and load the subject from it."""
    if SUBJECT_REF not in config.stash:
        config.stash[SUBJECT_REF] = resolve_subject(config.getoption("--subject"))
    return config.stash[SUBJECT_REF]


def configured_subject(config: pytest.Config) -> ModuleType:
    """The subject, imported once per process (a declared subject is built at configure time)."""
    if SUBJECT not in config.stash:
        config.stash[SUBJECT] = subject_ref_of(config).load()
    return config.stash[SUBJECT]


def declaration_of(config: pytest.Config) -> Declaration | None:
    """The declaration the subject is built from; ``None`` for a module subject."""
    return subject_ref_of(config).declaration


def strict(config: pytest.Config) -> bool:
    """Whether advisories are reds: a declaration's ``strict``; a module subject's ``STRICT`` (default true)."""
    declaration = declaration_of(config)
    if declaration is not None:
        return declaration.strict
    try:
        subject = configured_subject(config)
    except Exception:
        return True  # a subject that cannot be loaded here is judged as strictly as any module subject
    return bool(getattr(subject, "STRICT", True))


def report_dir_of(config: pytest.Config) -> Path:
    """Where this session's reports go (shared by all xdist workers): ``--report-dir``, else ``reports/<target>``."""
    path = Path(config.getoption("--report-dir") or REPO_ROOT / "reports" / configured_target(config).session)
    path.mkdir(parents=True, exist_ok=True)
    return path
