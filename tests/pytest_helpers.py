"""Running the gate's cases inside a real target venv from the harness's tests, and reading what they reported.

The proof that the gate bites is a real run: the target's own interpreter, real Megatron, the seeded subject named
through the same ``--subject`` option a downstream uses, the same command the nox target sessions run
(:func:`harness.plugin.command.case_command`), and the verdict read back from the JUnit file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.environment import REFERENCE_SUBJECT
from harness.install.framework_install import requirements_python
from harness.plugin.command import CaseRun, case_command, run_cases, run_options, subject_folder, subject_runs
from harness.plugin.warm_client import run_warm
from harness.subjects.declaration import DeclarationFileError, is_declaration, read_declaration_file
from harness.subjects.requirements import declared_install, merged
from harness.targets.matrix import load_matrix, venv_python

ROOT = REPO_ROOT


def on_one_target(values: Sequence[str], kept: Sequence[str]) -> list[Any]:
    """``values`` as parameters, those not in ``kept`` marked ``every_target``: ``nox -s tests`` (the README's
    command, and CI's) runs a whole-gate check on the one or two targets ``kept``; ``nox -s tests-all`` repeats it on
    every target or framework."""
    return [value if value in kept else pytest.param(value, marks=pytest.mark.every_target) for value in values]


def selected_parameters(request: pytest.FixtureRequest, *names: str) -> list[tuple[Any, ...]]:
    """The values of the parameters ``names`` of the tests of the requesting module that use the requesting fixture
    and that this run will run (after ``-m``, ``-k`` and node ids have deselected the others), in order: a warm run
    planned from them holds only the subjects some test reads (another test of the module may take a parameter of
    the same name without reading the fixture's runs)."""
    values = []
    for item in request.session.items:
        params = getattr(item, "callspec", None) and item.callspec.params
        uses = request.fixturename in getattr(item, "fixturenames", ())
        if item.path == request.path and uses and params and all(name in params for name in names):
            values.append(tuple(params[name] for name in names))
    return list(dict.fromkeys(values))


SEEDED = ROOT / "harness" / "sensitivity" / "seeded"


def target_python(session: str) -> Path:
    """The interpreter of ``session``'s nox venv; the test fails (not skips) when it has not been built."""
    python = venv_python(ROOT / ".nox", session)
    if not python.exists():
        pytest.fail(f"target venv for {session} is missing ({python}); build it with: nox -s {session}")
    return python


def subject_python(session: str, subjects: Iterable[Path | str | None]) -> Path:
    """The interpreter ``subjects`` run in on ``session``: the target venv's, or where their declarations install a
    framework or name requirements, the venv that holds those too (built once per set, as the target session
    builds it)."""
    installs = []
    for subject in subjects:
        if subject is not None and is_declaration(str(subject)):
            try:
                installs.append(declared_install(read_declaration_file(subject)))
            except DeclarationFileError:
                continue  # the session reports it, in its one line
    install = merged(installs)
    if install.empty:
        return target_python(session)
    target = load_matrix(ROOT / "matrix.yaml").target(session)
    return requirements_python(target_python(session), install, target.requirements(), target.python)[0]


def download_megatron_wheel(version: str, directory: Path) -> Path:
    """The megatron-core wheel of ``version`` from the package index, fetched with this interpreter's pip (target
    venvs built by uv have none)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(directory)]
    subprocess.run([*command, f"megatron-core=={version}"], check=True, timeout=600)
    return next(directory.glob("megatron_core-*.whl"))


@dataclass
class RunVerdicts:
    """A run of cases as the tests read it: verdicts keyed by test name (``test_partition[...]``), which is how the
    tests name the case a seeded break must turn red."""

    returncode: int
    output: str
    verdicts: dict[str, tuple[str, str]]
    report_dir: Path | None = None
    """Where the run's ``junit.xml`` and ``summary.json`` are."""

    @classmethod
    def of(cls, run: CaseRun, report_dir: Path | None = None) -> RunVerdicts:
        verdicts = {case.name or case.module: (case.verdict, case.text) for case in run.cases}
        return cls(run.returncode, run.output, verdicts, report_dir)

    def failed(self) -> dict[str, str]:
        """Test names that failed or errored, with their failure text."""
        return {name: text for name, (verdict, text) in self.verdicts.items() if verdict == "failed"}

    def require_red(self, label: str) -> dict[str, str]:
        """The failures of a run that must have gone red through failing cases (exit 1), not through a usage error."""
        assert self.returncode == 1, f"{label}: expected a red run, got exit {self.returncode}\n{self.output[-3000:]}"
        return self.failed()


def run_target_cases(
    session: str,
    selection: list[str],
    tmp_path: Path,
    subject: Path | str | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> RunVerdicts:
    """Run ``selection`` (paths or node ids under cases/) in ``session``'s venv and collect the verdicts."""
    options = [*(extra or []), *([f"--subject={subject}"] if subject is not None else [])]
    python = subject_python(session, [subject])
    command = case_command(session, tmp_path, selection, python=python, profile="ci", options=options)
    environment = {**os.environ, **(env or {})}
    return RunVerdicts.of(run_cases(command, environment, timeout, 200_000, run_warm), tmp_path)


def run_subjects_together(
    session: str,
    selection: list[str],
    subjects: Sequence[Path | str],
    directory: Path,
    timeout: float = 1800,
    first_red: bool = False,
) -> dict[str, RunVerdicts]:
    """Run ``selection`` for every subject in one warm run (:mod:`harness.plugin.warm_sessions`) in ``session``'s
    venv: each subject's verdicts by its name as given (``str`` of a path); with ``first_red``, each subject's session
    stops at its first red case, unshrunk (:func:`harness.plugin.command.run_options`)."""
    specs = list(dict.fromkeys(str(subject) for subject in subjects))
    python = subject_python(session, specs)
    profile, options = run_options(first_red)
    command = case_command(
        session, directory, selection, python=python, profile=profile, options=options, subjects=specs
    )
    _, runs = subject_runs(command, dict(os.environ), timeout, 200_000, run_warm)
    if len(specs) == 1:
        return {specs[0]: RunVerdicts.of(runs[0], directory)}
    folders = [subject_folder(directory, n, spec) for n, spec in enumerate(specs, 1)]
    return {spec: RunVerdicts.of(run, folder) for spec, run, folder in zip(specs, runs, folders, strict=True)}


@dataclass
class SharedRuns:
    """The runs a test module needs, made together: the first test that asks for a (session, selection) runs every
    subject the module lists for that pair in one warm run, the others read their subject's verdicts from it.

    The harness's tests run with ``--dist loadfile``: one worker runs a module's tests, so each warm run is made
    once. (``loadgroup`` would not do: pytest-xdist 3.8 names a group by rewriting ``item._nodeid``, which pytest 9.2
    no longer reads, so the marked tests are spread like any others.)"""

    plan: Iterable[tuple[str, tuple[str, ...], Path | str]]
    """``(session, selection, subject)`` of every run the module's tests ask for."""
    directory: Callable[[], Path]
    first_red: bool = False
    """Each subject's session stops at its first red case, unshrunk: for a module that asks of each subject only
    whether it is red or green, and which case went red first (a reference subject in the plan still runs every case,
    having no red to stop at)."""
    made: dict[tuple[str, tuple[str, ...]], dict[str, RunVerdicts]] = field(default_factory=dict)

    def run(self, session: str, selection: Sequence[str], subject: Path | str = REFERENCE_SUBJECT) -> RunVerdicts:
        """The verdicts of ``subject`` on ``session`` for ``selection``."""
        key = (session, tuple(selection))
        if key not in self.made:
            subjects = [planned for s, sel, planned in self.plan if (s, sel) == key]
            assert str(subject) in map(str, subjects), f"{subject} is not in the module's plan for {key}"
            self.made[key] = run_subjects_together(
                session, list(selection), subjects, self.directory(), first_red=self.first_red
            )
        return self.made[key][str(subject)]
