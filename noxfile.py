# /// script
# dependencies = ["nox>=2025.2.9", "pyyaml>=6", "packaging>=23"]
# ///
"""Sessions of the megatron-conformance gate, generated from matrix.yaml.

One session per target (``nox -s megatron-0.15``), plus ``tests`` (the harness's own tests, which also drive
two real targets end to end) and ``lint``. Arguments after ``--`` go to pytest; a test id or path among them
replaces the default ``cases`` directory, which is what the repro lines printed on a red rely on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness.installer import HARNESS_REQUIREMENTS, describe, install_command  # noqa: E402
from harness.matrix import MatrixError, Target, load_matrix  # noqa: E402

try:
    MATRIX = load_matrix(os.environ.get("MEGATRON_CONFORMANCE_MATRIX", ROOT / "matrix.yaml"))
except MatrixError as err:
    raise SystemExit(f"megatron-conformance: {err}") from None
REPORTS = Path(os.environ.get("MEGATRON_CONFORMANCE_REPORTS", ROOT / "reports"))
DEFAULT_TARGETS = ("megatron-0.13", "megatron-0.15")
TESTS_TARGETS = DEFAULT_TARGETS
KNOWN = {t.session: t for t in MATRIX.targets}
HARNESS_TARGET = KNOWN.get(TESTS_TARGETS[0], MATRIX.targets[0])

nox.needs_version = ">=2025.2.9"
nox.options.sessions = [name for name in DEFAULT_TARGETS if name in KNOWN]
nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True


def _pytest_selection(posargs: list[str], default: str) -> list[str]:
    """Posargs that name tests replace the default directory; options are appended as they are."""
    names_tests = any(a.startswith(("cases", "tests")) or "::" in a for a in posargs)
    return list(posargs) if names_tests else [default, *posargs]


def _install_target(session: nox.Session, target: Target) -> None:
    requirements = [*target.requirements(), *HARNESS_REQUIREMENTS]
    backend = session.venv_backend
    try:
        session.install(*install_command(requirements, backend))
    except nox.command.CommandFailed:
        session.error(
            f"target {target.session}: could not install its pins ({describe(requirements, backend)}); "
            f"check the 'megatron', 'torch', 'numpy' and 'extra_packages' keys in {MATRIX.path.name}"
        )


def _make_target_session(target: Target) -> None:
    def run_target(session: nox.Session) -> None:
        _install_target(session, target)
        report_dir = REPORTS / target.session
        report_dir.mkdir(parents=True, exist_ok=True)
        workers = os.environ.get("MEGATRON_CONFORMANCE_WORKERS", "auto")
        session.run(
            "python",
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            "-n",
            workers,
            f"--target={target.session}",
            f"--matrix={MATRIX.path}",
            f"--junitxml={report_dir / 'junit.xml'}",
            f"--report-dir={report_dir}",
            *_pytest_selection(session.posargs, "cases"),
        )

    run_target.__doc__ = f"Gate on {target.description}."
    nox.session(name=target.session, python=target.python, tags=["targets"])(run_target)


for _target in MATRIX.targets:
    _make_target_session(_target)


@nox.session(python=HARNESS_TARGET.python)
def tests(session: nox.Session) -> None:
    """The harness's own tests; first runs megatron-0.13 and megatron-0.15 end to end (reusing their venvs)."""
    torch_pin = f"torch{HARNESS_TARGET.torch}"
    session.install(*install_command([*HARNESS_REQUIREMENTS, "nox", "ruff", torch_pin], session.venv_backend))
    session.run("nox", "-f", str(ROOT / "noxfile.py"), "--reuse-venv=yes", "-s", *TESTS_TARGETS)
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        os.environ.get("MEGATRON_CONFORMANCE_WORKERS", "auto"),
        *_pytest_selection(session.posargs, "tests"),
    )


@nox.session(python=HARNESS_TARGET.python)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the project."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
