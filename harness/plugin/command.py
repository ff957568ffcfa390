"""The one pytest command that runs cases on a target, and running it to read the verdicts back.

The nox target sessions, the sensitivity runner and the harness's own tests all build it here, so what ``tests/``
exercises is the command users run. The plugins are loaded with ``-p`` (the gate's, the import-side-effects family's
session watch, the grouped warnings); the command runs from the repository root, which ``python -m`` puts on
``sys.path`` so the ``harness`` package is found.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
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
WARM_SESSIONS = "harness.plugin.warm_sessions"
_CASES_INI = Path(__file__).resolve().parent / "cases.ini"
OUTPUT_FILE = "output.txt"
"""What a subject's session of a warm run printed, in its folder (also streamed to the run's stdout)."""
SUBJECT_STATUS_FILE = "exit-status"
"""A subject's session's exit status (a signal as its negative number), in its folder of a warm run."""
BROKEN_STATUS = 3
"""pytest's status for an internal error: a subject's session that never said how it ended, or failed before pytest."""
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")
_DEFAULT_SELECTION = ("cases",)


def run_options(first_red: bool) -> tuple[str, list[str]]:
    """The hypothesis profile and pytest options of a run. With ``first_red`` the run stops at its first red case
    and hypothesis does not shrink: enough where the only question is whether, and where, a subject turns red (a
    mutant of the sensitivity catalogue, a seeded break in the harness's tests). Without it every case runs its full
    ``ci`` profile, as the gate does."""
    return ("fail-fast", ["-x"]) if first_red else ("ci", [])


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
    subjects: Sequence[str] = (),
    mutations: Path | None = None,
) -> list[str]:
    """Run ``selection`` of ``cases/`` on ``target``: JUnit and ``summary.json`` under ``report_dir``, ``workers``
    xdist workers ("0" for one process), the hypothesis ``profile`` (the plugin's default when None), and
    ``options`` before the selection.

    The cases run in an interpreter that imported torch and Megatron once for the session and its ranks
    (:mod:`harness.plugin.warm_sessions`). One subject in ``subjects`` is passed as ``--subject``; several, or any
    with a file of Megatron ``mutations`` (one per subject), run one forked session each, each with its folder under
    ``report_dir`` (:func:`subject_runs` reads them back). With xdist workers, which import both themselves, the
    command is plain pytest."""
    arguments = [
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
        *([f"--hypothesis-profile={profile}"] if profile else []),
        *options,
    ]
    named = [f"--subject={subject}" for subject in subjects]
    if len(subjects) > 1 or mutations is not None:
        warm = [f"--report-dir={report_dir}", *named, *([f"--mutations={mutations}"] if mutations else [])]
        return [str(python), "-m", WARM_SESSIONS, *warm, "--", *arguments, *selection]
    reports = [f"--junitxml={report_dir / 'junit.xml'}", f"--report-dir={report_dir}"]
    runner = ["pytest"] if workers != "0" else [WARM_SESSIONS, "--"]
    return [str(python), "-m", *runner, *arguments, *reports, *named, *selection]


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


def subject_folder(report_dir: Path, index: int, spec: str) -> Path:
    """The folder of the ``index``-th subject (from 1) of a warm run: its number keeps two ``pyproject.toml``
    declarations apart, its file or module name says whose it is."""
    name = Path(spec).stem if spec.endswith((".py", ".toml")) else Path(spec).name
    return report_dir / f"{index}-{_SLUG.sub('_', name) or 'subject'}"


def several_subjects(command: Sequence[str]) -> bool:
    """Whether ``command`` runs one forked session per subject, each reporting in its own folder."""
    return WARM_SESSIONS in command and any(part.startswith("--subject=") for part in _warm_options(command))


def _warm_options(command: Sequence[str]) -> Sequence[str]:
    return command[: command.index("--")] if "--" in command else command


def _option(command: Sequence[str], name: str) -> str:
    return next(part.split("=", 1)[1] for part in command if part.startswith(f"{name}="))


def run_fresh(command: list[str], environment: Mapping[str, str] | None, timeout: float) -> subprocess.CompletedProcess:
    """``command`` started fresh from the repository root, its output captured: the default :data:`Runner`."""
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=dict(environment) if environment is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


Runner = Callable[[list[str], Mapping[str, str] | None, float], subprocess.CompletedProcess]
"""How a case command is run: as :func:`subprocess.run` runs it from the repository root, output captured, killed
past its timeout (:class:`subprocess.TimeoutExpired`). The project's tests pass one that forks warm runs from a
server (:mod:`harness.plugin.warm_client`)."""


def run_cases(
    command: list[str],
    environment: Mapping[str, str] | None = None,
    timeout: float = 900,
    keep_output: int = 4000,
    runner: Runner = run_fresh,
) -> CaseRun:
    """Run a one-subject :func:`case_command` from the repository root and read its JUnit back (``environment``
    replaces the process environment when given)."""
    junit = Path(_option(command, "--junitxml"))
    completed = runner(command, environment, timeout)
    return CaseRun(completed.returncode, (completed.stdout + completed.stderr)[-keep_output:], read_cases(junit))


def subject_runs(
    command: list[str],
    environment: Mapping[str, str] | None = None,
    timeout: float = 1800,
    keep_output: int = 4000,
    runner: Runner = run_fresh,
) -> tuple[int, list[CaseRun]]:
    """Run a several-subject :func:`case_command`: its exit status, and each subject's run (its session's exit
    status, output and verdicts) in the order the command names them. A subject whose session left no JUnit file
    has no verdicts and the output it printed; one that left no exit status (the warm run died before it ended)
    is broken (status 3), never green or red. A command of one subject is run as :func:`run_cases` runs it."""
    if not several_subjects(command):
        run = run_cases(command, environment, timeout, keep_output, runner)
        return run.returncode, [run]
    report_dir = Path(_option(command, "--report-dir"))
    subjects = [part.split("=", 1)[1] for part in _warm_options(command) if part.startswith("--subject=")]
    completed = runner(command, environment, timeout)
    # What the run printed outside its subjects' sessions (why it died before a subject): on stderr when run as a
    # subprocess, in the one output of a run forked by a warm server.
    printed = completed.stdout + completed.stderr
    runs = []
    for index, subject in enumerate(subjects, 1):
        folder = subject_folder(report_dir, index, subject)
        output = (folder / OUTPUT_FILE).read_text(errors="replace") if (folder / OUTPUT_FILE).is_file() else ""
        status_file = folder / SUBJECT_STATUS_FILE
        status = int(status_file.read_text()) if status_file.is_file() else BROKEN_STATUS
        junit = folder / "junit.xml"
        cases = read_cases(junit) if junit.is_file() else []
        runs.append(CaseRun(status, output[-keep_output:] or printed[-keep_output:], cases))
    return completed.returncode, runs
