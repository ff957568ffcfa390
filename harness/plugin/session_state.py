"""What a target session has in force (target, matrix, subject, report directory), kept in pytest's config stash.

The gate plugin fills it at configure time; the other plugins of a session (the session watch), the case files and
the gate's own hooks read it through these functions, never through the stash keys.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from harness import REPO_ROOT
from harness.plugin.declaration import Declaration
from harness.plugin.subjects import load_subject, subject_spec
from harness.targets.matrix import Matrix, Target

MATRIX = pytest.StashKey[Matrix]()
TARGET = pytest.StashKey[Target]()
SUBJECT = pytest.StashKey[ModuleType]()


def configured_target(config: pytest.Config) -> Target:
    """The target in force."""
    return config.stash[TARGET]


def configured_matrix(config: pytest.Config) -> Matrix:
    """The matrix that defines the target in force."""
    return config.stash[MATRIX]


def subject_spec_of(config: pytest.Config) -> str:
    """The subject as named (``--subject``, else the environment, else the reference subject)."""
    return subject_spec(config.getoption("--subject"))


def subject_name_of(config: pytest.Config) -> str:
    """The subject as code elsewhere loads it again (rank processes, another working directory): a path made
    absolute, a module name as it is."""
    spec = subject_spec_of(config)
    return str(Path(spec).resolve()) if Path(spec).exists() else spec


def configured_subject(config: pytest.Config) -> ModuleType:
    """The subject, imported once per process (a declared subject is built at configure time)."""
    if SUBJECT not in config.stash:
        config.stash[SUBJECT] = load_subject(subject_name_of(config))
    return config.stash[SUBJECT]


def declaration_of(config: pytest.Config) -> Declaration | None:
    """The declaration the subject was built from; ``None`` for a module subject."""
    subject = config.stash.get(SUBJECT, None)
    return getattr(subject, "DECLARATION", None)


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
