"""The one pytest command that runs cases on a target, and running it to read the verdicts back.

The nox target sessions, the sensitivity runner and the harness's own tests all build it here, so what ``tests/``
exercises is the command users run. The plugins are loaded with ``-p`` (the gate's, the import-side-effects family's
session watch, the grouped warnings); the command runs from the repository root, which ``python -m`` puts on
``sys.path`` so the ``harness`` package is found.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import REPO_ROOT
from harness.formats.junit import JUnitCase, read_cases

_PLUGINS = (
    "harness.plugin.quick_exit",
    "harness.plugin.gate",
    "harness.ranks.early_start",
    "harness.contracts.import_side_effects.session_watch",
    "harness.plugin.warnings_summary",
)
"""The quick exit (first: its exit function must be registered before any other but logging's), the gate plugin,
the early start of the fork server, the import-side-effects family's watch over the whole session (Megatron
unchanged after every case), and the installed packages' warnings told one line per kind."""
_CASES_INI = Path(__file__).resolve().parent / "cases.ini"
_DEFAULT_SELECTION = ("cases",)


def case_command(
    target: str,
    report_dir: Path,
    selection: Sequence[str] = _DEFAULT_SELECTION,
    *,
    python: str | Path = "python",
    matrix: Path | None = None,
    workers: str = "0",
    profile: str | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """Run ``selection`` of ``cases/`` on ``target``: JUnit and ``summary.json`` under ``report_dir``, ``workers``
    xdist workers ("0" for one process), the hypothesis ``profile`` (the plugin's default when None), and
    ``options`` before the selection."""
    return [
        str(python),
        "-m",
        "pytest",
        "-c",
        str(_CASES_INI),
        "--rootdir",
        str(REPO_ROOT),
        *(option for plugin in _PLUGINS for option in ("-p", plugin)),
        "-n",
        workers,
        "--dist",
        "loadgroup",
        f"--target={target}",
        *([f"--matrix={matrix}"] if matrix else []),
        f"--junitxml={report_dir / 'junit.xml'}",
        f"--report-dir={report_dir}",
        *([f"--hypothesis-profile={profile}"] if profile else []),
        *options,
        *selection,
    ]


@dataclass
class CaseRun:
    """One run of the case command: exit code, the end of its output, and every case's verdict from JUnit."""

    returncode: int
    output: str
    cases: list[JUnitCase]

    def failed(self) -> dict[str, str]:
        """Node ids of the red cases (failure or error), with their text."""
        return {case.nodeid: case.text for case in self.cases if case.verdict == "failed"}

    def verdicts(self) -> dict[str, str]:
        """Every case's verdict by node id."""
        return {case.nodeid: case.verdict for case in self.cases}

    def broken(self) -> bool:
        """The run itself went wrong (usage, internal error, nothing collected) rather than some case failing."""
        return self.returncode not in (0, 1) and not self.failed()


def run_cases(
    command: list[str], environment: Mapping[str, str] | None = None, timeout: float = 900, keep_output: int = 4000
) -> CaseRun:
    """Run a :func:`case_command` from the repository root and read its JUnit back (``environment`` replaces the
    process environment when given)."""
    junit = Path(next(part.split("=", 1)[1] for part in command if part.startswith("--junitxml=")))
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=dict(environment) if environment is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CaseRun(completed.returncode, (completed.stdout + completed.stderr)[-keep_output:], read_cases(junit))
