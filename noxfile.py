# /// script
# dependencies = ["nox[uv]>=2025.2.9", "pyyaml>=6", "packaging>=23"]
# ///
"""Sessions of the megatron-conformance gate, generated from matrix.yaml.

One session per target (``nox -s megatron-0.15``), plus ``tests`` (the harness's own tests, which also drive
three real targets end to end), ``lint``, ``api-diff`` (what changed in the subject's declared Megatron symbols
between two built targets), ``report`` (every target's results merged into one compatibility matrix) and
``sensitivity`` (the mutant catalogue against built targets: does each family still bite), ``scale`` (the bytes
each coalesced reduction flattens for real model configs) and ``bench`` (chunked vs upstream all-reduce, and the
gate's own costs). Arguments after ``--`` go to pytest; a test id or path among
them replaces the default ``cases`` directory, which is what the repro lines printed on a red rely on.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness.bisect import early_warning  # noqa: E402
from harness.bisect import report as bisect_report  # noqa: E402
from harness.bisect import run as bisect_run  # noqa: E402
from harness.bisect.gate_step import GateStep  # noqa: E402
from harness.formats.environment import (  # noqa: E402
    DEFAULT_MATRIX,
    ENVDIR_ENV_VAR,
    MATRIX_ENV_VAR,
    REPORTS_ENV_VAR,
    launcher,
)
from harness.formats.generator_error import GATE_ERROR_STATUS, NOT_A_VERDICT  # noqa: E402
from harness.formats.generator_error import PREFIX as GATE_ERROR_PREFIX  # noqa: E402
from harness.formats.junit import read_cases  # noqa: E402
from harness.formats.scale_findings import DEFAULT_MODELS  # noqa: E402
from harness.formats.scale_findings import finding as scale_finding  # noqa: E402
from harness.formats.summary import FILE_NAME as SUMMARY_FILE  # noqa: E402
from harness.formats.summary import SummaryError, read_summary  # noqa: E402
from harness.install.framework_install import RequirementsError, requirements_python  # noqa: E402
from harness.launch.side_by_side import JOBS_ENV_VAR, jobs_from, run_side_by_side  # noqa: E402
from harness.plugin.command import SUBJECT_STATUS_FILE, case_command  # noqa: E402
from harness.plugin.scale_estimate import measure_in_target  # noqa: E402
from harness.reports.api_diff import ApiDiffError, compare, render_markdown, write_report  # noqa: E402
from harness.reports.compatibility import ReportError, headline, write_reports  # noqa: E402
from harness.reports.scale_table import scale_markdown  # noqa: E402
from harness.sensitivity.catalogue import CATALOGUE, CatalogueError, load_catalogue, select  # noqa: E402
from harness.sensitivity.cli import parse_arguments  # noqa: E402
from harness.sensitivity.mutate import MutationError  # noqa: E402
from harness.sensitivity.report import summary_line  # noqa: E402
from harness.sensitivity.report import write_report as write_sensitivity_report  # noqa: E402
from harness.sensitivity.runner import run_sensitivity  # noqa: E402
from harness.sensitivity.soak import soak as run_soak  # noqa: E402
from harness.sensitivity.soak import write_report as write_soak_report  # noqa: E402
from harness.subjects.declaration import DeclarationFileError  # noqa: E402
from harness.subjects.framework_source import framework_source_root  # noqa: E402
from harness.subjects.loading import SubjectError, resolve_subject, subject_spec, subject_specs  # noqa: E402
from harness.subjects.requirements import declared_install, merged  # noqa: E402
from harness.targets import candidate as candidates  # noqa: E402
from harness.targets.index_builds import BuildIndexError, default_index, find, index_builds  # noqa: E402
from harness.targets.interpreters import expose_on_path, missing_message, running_version  # noqa: E402
from harness.targets.matrix import MatrixError, Target, load_matrix, venv_python  # noqa: E402
from harness.targets.release_source import ReleaseSourceError  # noqa: E402
from harness.targets.venv_install import HARNESS_REQUIREMENTS, describe, install_command  # noqa: E402

try:
    MATRIX = load_matrix(os.environ.get(MATRIX_ENV_VAR, DEFAULT_MATRIX))
except MatrixError as err:
    raise SystemExit(f"megatron-conformance: {err}") from None
REPORTS = Path(os.environ.get(REPORTS_ENV_VAR, ROOT / "reports"))
ENVDIR = Path(os.environ.get(ENVDIR_ENV_VAR, ROOT / ".nox"))
"""The target venvs: the checkout's ``.nox/``, or the framework's own when the installed command runs the gate."""
DEFAULT_TARGETS = ("megatron-0.13", "megatron-0.15")
NEWEST_TARGET = MATRIX.targets[-1].session
TESTS_TARGETS = tuple(
    dict.fromkeys((*DEFAULT_TARGETS, "megatron-0.16", "megatron-0.17", "megatron-0.18", NEWEST_TARGET))
)
KNOWN = {t.session: t for t in MATRIX.targets}
HARNESS_TARGET = KNOWN.get(TESTS_TARGETS[0], MATRIX.targets[0])

nox.needs_version = ">=2025.2.9"
nox.options.sessions = [name for name in DEFAULT_TARGETS if name in KNOWN]
nox.options.default_venv_backend = "uv|venv"
nox.options.error_on_missing_interpreters = True
nox.options.envdir = str(ENVDIR)
if hasattr(nox.options, "download_python"):
    nox.options.download_python = "never"


INTERPRETER_LINKS = ENVDIR / ".interpreters"


def _python_available(version: str) -> bool:
    """Whether nox can make a venv of ``version``: the running one, or one found on this machine and linked as
    ``python<version>`` first on PATH (see harness.targets.interpreters)."""
    return version == running_version() or expose_on_path(version, INTERPRETER_LINKS)


def _pytest_selection(posargs: list[str], default: str) -> list[str]:
    """Posargs that name tests replace the default directory; options are appended as they are."""
    names_tests = any(a.startswith(("cases", "tests")) or "::" in a for a in posargs)
    return list(posargs) if names_tests else [default, *posargs]


def _install_target(session: nox.Session, target: Target) -> None:
    requirements = [*target.requirements(), *HARNESS_REQUIREMENTS]
    backend = session.venv_backend
    try:
        session.install(*install_command(requirements, backend, target.python))
    except nox.command.CommandFailed:
        session.error(
            f"target {target.session}: could not install its pins ({describe(requirements, backend, target.python)}); "
            f"check the 'megatron', 'torch', 'numpy' and 'extra_packages' keys in {MATRIX.path.name}"
        )


def _default_case_workers() -> str:
    """xdist workers for a target's cases: none below four cores.

    Each worker imports torch and Megatron, and the one that runs the cases on ranks starts a fork server of its
    own; one process also starts that server early, beside its first cases. On 2 cores one process runs the
    megatron-0.15 cases in 25 s where two workers take 27 s (2026-12-01).
    """
    cores = os.cpu_count() or 1
    return "0" if cores < 4 else str(min(4, cores // 2))


def _one_subject(session: nox.Session) -> str:
    """The subject a session of one subject checks; several named in the environment end it with one line."""
    try:
        return subject_spec()
    except SubjectError as err:
        session.error(str(err))


def _clear_other_layout(report_dir: Path, several: bool) -> None:
    """Remove what an earlier run left in the target's folder that the report would read as this run's: the
    subjects' folders of a run of several (a run of fewer subjects leaves no such folder behind), and, before several
    subjects run, a one-subject session's verdicts."""
    for folder in report_dir.iterdir():
        if folder.is_dir() and (folder / SUBJECT_STATUS_FILE).is_file():
            shutil.rmtree(folder)
    if several:
        for name in ("junit.xml", SUMMARY_FILE):
            (report_dir / name).unlink(missing_ok=True)


def _subject_python(session: nox.Session, target: Target, specs: list[str]) -> str:
    """The interpreter the cases run in: the target venv's, or, where the subjects' declarations install a framework
    or name requirements, that of a venv holding the target's packages and theirs (one per target and set, reused).
    What the install reported (overrides, what moved, what was left out) is logged and becomes the session's
    findings."""
    installs = []
    sources = []
    for spec in specs or [_one_subject(session)]:
        try:
            declaration = resolve_subject(spec).declaration
        except (DeclarationFileError, SubjectError):
            continue  # the session itself reports it, in its one line
        if declaration is not None:
            try:
                installs.append(declared_install(declaration))
            except DeclarationFileError as err:
                session.error(str(err))
            sources.append(declaration)
    install = merged(installs)
    if install.empty:
        return "python"
    session.log(f"the subject's requirements: {', '.join([*install.requirements, *map(str, install.folders)])}")
    target_python = Path(session.virtualenv.location) / "bin" / "python"
    try:
        python, report = requirements_python(target_python, install, target.requirements(), target.python)
    except RequirementsError as err:
        session.error(str(err))
    for line in report:
        session.log(f"install: {line}")
    for declaration in sources:
        try:
            framework_source_root(declaration)
        except ReleaseSourceError as err:
            session.log(f"install: the framework's source cannot be read: {err}")
    return str(python)


def _make_target_session(target: Target) -> None:
    def run_target(session: nox.Session) -> None:
        _install_target(session, target)
        report_dir = REPORTS / target.session
        report_dir.mkdir(parents=True, exist_ok=True)
        workers = os.environ.get("MEGATRON_CONFORMANCE_WORKERS", _default_case_workers())
        selection = _pytest_selection(session.posargs, "cases")
        subjects = subject_specs()
        several = subjects if len(subjects) > 1 else []
        _clear_other_layout(report_dir, bool(several))
        if several:
            session.log(f"{len(several)} subjects, each in a session of its own: reports in {report_dir}/<n>-<name>/")
        python = _subject_python(session, target, subjects)
        command = case_command(
            target.session,
            report_dir,
            selection,
            python=python,
            matrix=MATRIX.path,
            workers=workers,
            subjects=several,
        )
        try:
            session.run(*command, external=python != "python")
        except nox.command.CommandFailed as err:
            if err.return_code == GATE_ERROR_STATUS:
                _end_with_gate_error(session, target, report_dir)
            raise

    run_target.__doc__ = f"Gate on {target.description}."
    if not _python_available(target.python):
        _register_missing_python(target.session, target.python, run_target.__doc__, ["targets"])
        return
    nox.session(name=target.session, python=target.python, tags=["targets"])(run_target)


_GATE_ERRORS: list[str] = []
"""Target sessions of this nox run that ended with the gate's own error."""


def _end_with_gate_error(session: nox.Session, target: Target, report_dir: Path) -> None:
    """End a target session whose cases the gate's own example generator broke, saying so in one line, and make the
    nox run leave with the gate's status (:func:`_leave_with_gate_status`), whatever the other sessions did."""
    if not _GATE_ERRORS:
        atexit.register(_leave_with_gate_status)
    _GATE_ERRORS.append(target.session)
    try:
        errors = read_summary(report_dir).gate_errors
    except (OSError, SummaryError):
        errors = []
    line = errors[0]["text"] if errors else f"{GATE_ERROR_PREFIX} ({report_dir} names the case); {NOT_A_VERDICT}"
    session.error(f"target {target.session}: {line} (exit {GATE_ERROR_STATUS})")


def _leave_with_gate_status() -> None:
    """nox ends a run with a failed session with 1, a red's status; a run in which the gate itself failed leaves with
    the gate's own, once nox has printed its summary (exit functions run after it)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(GATE_ERROR_STATUS)


def _register_missing_python(name: str, version: str, doc: str, tags: list[str]) -> None:
    """A session that only says which Python it needs: nox's own message would not name the target."""

    def missing(session: nox.Session) -> None:
        session.error(missing_message(name, version))

    missing.__doc__ = f"{doc} (needs Python {version}: not found)"
    nox.session(name=name, python=version, venv_backend="none", tags=tags)(missing)


for _target in MATRIX.targets:
    _make_target_session(_target)


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""Headless browsers the report's HTML test can drive, by the names distributions install them under."""
TEST_SUITES = {"unit": "tests/unit", "e2e": "tests/e2e"}


def _test_selection(posargs: list[str]) -> list[str]:
    """``unit`` or ``e2e`` as the first argument names a suite; test paths or ids replace ``tests``."""
    if posargs and posargs[0] in TEST_SUITES:
        return [TEST_SUITES[posargs[0]], *posargs[1:]]
    return _pytest_selection(posargs, "tests")


def _ensure_browser(session: nox.Session) -> str:
    """A headless browser for the report's HTML test: the one installed, else chromium from the system package
    manager when the session runs as root; otherwise the session ends saying what to install."""
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if found:
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.log("installing chromium for the report's HTML test (apt-get install chromium)")
        # An install cut off earlier (a killed CI job) leaves dpkg "interrupted", and apt refuses every install until
        # the pending packages are configured; finishing them is what apt's own message asks for.
        session.run("dpkg", "--configure", "-a", external=True, env=env, silent=True)
        session.run("apt-get", "update", "-qq", external=True, env=env, silent=True)
        session.run("apt-get", "install", "-y", "-qq", "--fix-broken", "chromium", external=True, env=env, silent=True)
        found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
        if found:
            return found
    session.error(
        "nox -s tests: the report's HTML test needs a headless browser and none is on PATH "
        f"({', '.join(BROWSERS)}): install one (e.g. sudo apt-get install chromium) and run it again, "
        "or run the unit suite alone: nox -s tests -- unit"
    )


def _run_target_sessions(session: nox.Session, targets: list[str]) -> None:
    """Every target's session with the reference subject, two at a time (``MEGATRON_CONFORMANCE_TARGET_JOBS``): the
    venvs the end-to-end tests use, each built and green; a red or broken target ends the tests session, naming the
    command that replays it."""
    try:
        jobs = jobs_from(os.environ.get(JOBS_ENV_VAR))
    except ValueError as err:
        session.error(str(err))
    nox_command = [str(Path(session.bin) / "nox"), "-f", str(ROOT / "noxfile.py"), "--reuse-venv=yes", "-s"]
    env = {**os.environ, "PATH": os.pathsep.join([session.bin, os.environ.get("PATH", "")])}
    session.log(f"the reference subject on {', '.join(targets)}, {jobs} at a time; each one's output as it ends")
    commands = {target: [*nox_command, target] for target in targets}
    ended = run_side_by_side(commands, jobs, Path(session.virtualenv.location) / "target-logs", env)
    failed = [done.name for done in ended if done.returncode != 0]
    if failed:
        session.error(f"target sessions not green: {', '.join(failed)}; replay each with: nox -s {' '.join(failed)}")


def _run_tests(session: nox.Session, every_target: bool) -> None:
    """Install the tools, build and run the targets the end-to-end suite drives (unless the selection is the unit
    suite alone), then pytest over the selection: without ``every_target``, less the tests marked so, unless the
    selection names test ids."""
    selection = _test_selection(session.posargs)
    named = any("::" in part for part in selection)
    narrowing = [] if every_target or named else EVERY_TARGET_DESELECTED
    torch_pin = f"torch{HARNESS_TARGET.torch}"
    tools = ["nox[uv]", "pip", "ruff", "check-jsonschema", "matplotlib", "markdown-it-py"]
    session.install(
        *install_command([*HARNESS_REQUIREMENTS, *tools, torch_pin], session.venv_backend, HARNESS_TARGET.python)
    )
    env = {}
    paths = [part for part in selection if part.startswith("tests") or "::" in part]
    if any(not path.startswith(TEST_SUITES["unit"]) for path in paths):
        env["MEGATRON_CONFORMANCE_BROWSER"] = _ensure_browser(session)
        _run_target_sessions(session, [t for t in TESTS_TARGETS if t in KNOWN])
    workers = os.environ.get("MEGATRON_CONFORMANCE_WORKERS", "auto")
    # The slowest tests are listed at the end: where the suite's time goes is read from every run, CI's included.
    # Files go to the workers in collection order (the end-to-end modules, each minutes of warm runs, then the unit
    # modules, seconds each, which fill the end): xdist's default order, most tests first, put unit modules first
    # and could leave a two-minute module for last on one worker while the other waited (up to 80 s of a CI run).
    options = ["-n", workers, "--dist", "loadfile", "--no-loadscope-reorder", "--durations=20", "--durations-min=5"]
    session.run("python", "-m", "pytest", *options, *narrowing, *selection, env=env)


EVERY_TARGET_DESELECTED = ["-m", "not every_target"]
"""What ``tests`` leaves to ``tests-all``: the whole-gate checks repeated on more targets or frameworks."""


def tests(session: nox.Session) -> None:
    """The harness's own tests, the same selection everywhere (this README command, CI, a developer's run): --
    unit (no target venv, a minute) or -- e2e; both by default, the end-to-end suite after running megatron-0.13,
    -0.15 and -0.16 through the newest target. Whole-gate checks repeated on every target run on one or two here;
    a test id named after -- runs whatever its marks."""
    _run_tests(session, every_target=False)


def tests_all(session: nox.Session) -> None:
    """Everything ``tests`` runs, and the whole-gate checks it runs on one or two targets repeated on every target
    or framework (the tests marked every_target)."""
    _run_tests(session, every_target=True)


def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the project."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


# The installed gate ships no tests/: its command lists only the sessions a framework can run.
if (ROOT / "tests").is_dir():
    nox.session(python=HARNESS_TARGET.python)(tests)
    nox.session(name="tests-all", python=HARNESS_TARGET.python)(tests_all)
    nox.session(python=HARNESS_TARGET.python)(lint)


def _built_target_pythons(session: nox.Session, names: list[str]) -> dict[str, Path]:
    """The venv interpreter of each named target; an unknown target or an unbuilt venv ends the session."""
    pythons = {}
    for name in names:
        if name not in KNOWN:
            session.error(f"no target named {name!r} in {MATRIX.path.name} (known: {', '.join(KNOWN)})")
        python = venv_python(ENVDIR, name)
        if not python.exists():
            session.error(
                f"target {name}: its venv {python.parent.parent} is not built; build it with: {launcher()} -s {name}"
            )
        pythons[name] = python
    return pythons


@nox.session(name="api-diff", venv_backend="none")
def api_diff(session: nox.Session) -> None:
    """Diff the subject's declared Megatron symbols between two built targets: -- megatron-0.13 megatron-0.16."""
    if len(session.posargs) != 2 or len(set(session.posargs)) != 2:
        session.error(f"name two different targets: {launcher()} -s api-diff -- megatron-0.13 megatron-0.16")
    _print_drift(session, _built_target_pythons(session, session.posargs))


def _print_drift(session: nox.Session, pythons: dict[str, Path], fatal: bool = True) -> None:
    """The api-diff of two built venvs, printed and written to reports/api-diff/; where it cannot be measured, the
    session ends (``fatal``) or says so and goes on."""
    try:
        report = compare(pythons, _one_subject(session), REPORTS / ".fingerprints")
    except ApiDiffError as err:
        if fatal:
            session.error(str(err))
        session.warn(f"the drift could not be measured: {err}")
        return
    markdown, data = write_report(report, REPORTS / "api-diff")
    print(render_markdown(report))
    session.log(f"wrote {markdown} and {data}")


@nox.session(venv_backend="none")
def report(session: nox.Session) -> None:
    """Merge every target's reports/<session>/ into reports/compatibility.md (PR comment) and .html, or those of the
    targets named alone: -- [targets] [--baseline <subject label>]."""
    names, baseline = _report_arguments(session)
    unknown = [name for name in names if name not in KNOWN]
    if unknown:
        session.error(f"no target named {', '.join(unknown)} in {MATRIX.path.name} (known: {', '.join(KNOWN)})")
    # The targets a run asked for: a run narrowed to two of them is not "2 of 7 targets ran", and merges those alone.
    expected = {name: KNOWN[name] for name in names} or KNOWN
    try:
        matrix, markdown, page = write_reports(REPORTS, expected, baseline, only=bool(names))
    except ReportError as err:
        session.error(str(err))
    if matrix.left_out:
        session.log(f"merging {', '.join(names)} only; left out of this report: {', '.join(matrix.left_out)}")
    session.log(headline(matrix))
    session.log(f"wrote {markdown} and {page}")


def _report_arguments(session: nox.Session) -> tuple[list[str], str | None]:
    """The targets named after ``--``, and the subject that several subjects are compared with (``--baseline``)."""
    names, baseline, arguments = [], None, iter(session.posargs)
    for argument in arguments:
        if argument == "--baseline" or argument.startswith("--baseline="):
            baseline = argument.partition("=")[2] or next(arguments, "")
            if not baseline:
                session.error(f"--baseline needs a subject's label: {launcher()} -s report -- --baseline <label>")
        else:
            names.append(argument)
    return names, baseline


@nox.session(venv_backend="none")
def costs(session: nox.Session) -> None:
    """Each framework's session time next to the reference subject's in one warm run per target (default 0.15 and
    0.16): -- [targets] [--frameworks NAME ...]; the figures of docs/speed.md."""
    session.run("python", "-m", "tests.subject_costs", *session.posargs, external=True)


@nox.session(venv_backend="none")
def frameworks(session: nox.Session) -> None:
    """Every framework in tests/frameworks/ on each target (default: 0.13, 0.15, 0.16, 0.19), one warm run per
    target, against the verdicts written for them; then, with no arguments, the frameworks as published (mcore-bridge,
    ms-swift, verl) installed from the index and run on every target; writes docs/frameworks.md and fails where one
    is not as expected."""
    failed = []
    runs = [("tests.framework_table", *session.posargs)] + ([] if session.posargs else [("tests.published_sessions",)])
    for module, *arguments in runs:
        try:
            session.run("python", "-m", module, *arguments, external=True)
        except nox.command.CommandFailed:
            failed.append(module)
    if failed:
        session.error(f"not as expected: {', '.join(failed)} (its lines above)")


def published(session: nox.Session) -> None:
    """Frameworks as published on the package index (mcore-bridge, ms-swift, verl, and SkyRL of the blind corpus):
    their replaced Megatron symbols read from source on every matrix release, against the verdicts written for them
    beforehand; the rest of the blind corpus from checkouts named with --blind; writes docs/published.md:
    -- [NAME ...] [--targets VERSION ...] [--blind DIR]."""
    session.run("python", "-m", "tests.published_table", *session.posargs, external=True)


if (ROOT / "tests").is_dir():
    nox.session(venv_backend="none")(published)


@nox.session(venv_backend="none")
def scan(session: nox.Session) -> None:
    """A starter declaration for the framework under the given folder, from its source: -- PATH [--output FILE]."""
    session.run("python", "-m", "harness.source.starter", *session.posargs, external=True)


@nox.session(venv_backend="none")
def scale(session: nox.Session) -> None:
    """Bytes each coalesced reduction flattens for real model configs, on built targets: -- [targets]."""
    pythons = _built_target_pythons(session, session.posargs or list(DEFAULT_TARGETS))
    spec = _one_subject(session)
    try:
        declaration = resolve_subject(spec).declaration
    except (SubjectError, DeclarationFileError) as err:
        session.error(str(err))
    declared = declaration.scale if declaration is not None else {}
    request = {
        "models": declared.get("models") or list(DEFAULT_MODELS),
        "subject": spec,
        "budget": declared.get("budget"),
    }
    results = {}
    for name, python in pythons.items():
        session.log(f"{name}: measuring {len(request['models'])} models on the meta device")
        results[name] = measure_in_target(request, str(python))
        for result in results[name]:
            session.log(scale_finding(result))
    out = REPORTS / "scale"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "scale.md").write_text(scale_markdown(results))
    print(scale_markdown(results))
    session.log(f"wrote {out / 'scale.md'} and {out / 'scale.json'}")


@nox.session(venv_backend="none")
def sensitivity(session: nox.Session) -> None:
    """Mutants of Megatron and of the subject against built targets: -- --targets megatron-0.13 megatron-0.16."""
    options = parse_arguments(session.posargs, DEFAULT_TARGETS)
    pythons = _built_target_pythons(session, options.targets)
    try:
        mutants = select(load_catalogue(CATALOGUE, KNOWN), options.mutants)
        results = run_sensitivity(mutants, pythons, _one_subject(session), options.workers, session.log)
    except (CatalogueError, MutationError) as err:
        session.error(str(err))
    markdown, data = write_sensitivity_report(results, REPORTS / "sensitivity")
    session.log(f"wrote {markdown} and {data}")
    failures = results.failures()
    if failures:
        listed = "; ".join(f"{o.verdict}: {o.mutant} on {o.target}" for o in failures)
        session.error(f"{summary_line(results)}: {listed}")
    session.log(summary_line(results))


@nox.session(venv_backend="none")
def soak(session: nox.Session) -> None:
    """The reference subject and the correct variants under fresh random seeds, counting false reds (built targets):
    -- megatron-0.15 [more targets] [--runs 20] [--seeds N ...]."""
    parser = argparse.ArgumentParser(prog="nox -s soak --", description=soak.__doc__)
    parser.add_argument("targets", nargs="*", default=list(DEFAULT_TARGETS), metavar="SESSION")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="replay these seeds, one run each")
    options = parser.parse_args(session.posargs)
    runs = len(options.seeds) if options.seeds else options.runs
    if runs < 1:
        session.error("nox -s soak: --runs must be at least 1")
    pythons = _built_target_pythons(session, options.targets)
    try:
        result = run_soak(pythons, KNOWN, runs, session.log, options.seeds)
    except CatalogueError as err:
        session.error(str(err))
    path = write_soak_report(result, REPORTS / "soak")
    session.log(f"wrote {path}")
    for outcome in result.not_green():
        session.warn(f"{outcome.verdict} on {outcome.target}, seed {outcome.seed}: {outcome.subject} {outcome.red}")
        session.warn(f"    replay: {outcome.replay}")
    if result.not_green():
        session.error(result.summary())
    session.log(result.summary())


def _nested_nox(session: nox.Session, arguments: list[str], matrix: Path | None = None, check: bool = True) -> int:
    """This noxfile run again in a child nox, on ``matrix`` when given; returns its exit status."""
    env = {**os.environ, **({MATRIX_ENV_VAR: str(matrix)} if matrix else {})}
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *arguments]
    session.log(" ".join([f"{MATRIX_ENV_VAR}={matrix}"] if matrix else []) + " " + " ".join(command))
    returncode = subprocess.run(command, cwd=ROOT, env=env).returncode
    if check and returncode != 0:
        session.error(f"{' '.join(arguments)} failed (exit {returncode})")
    return returncode


def _derived_contract(session: nox.Session, python: Path) -> dict | None:
    derived, why = candidates.derived_contract(python, ROOT)
    if derived is None:
        session.warn(f"candidate: {why}")
    return derived


@nox.session(venv_backend="none")
def candidate(session: nox.Session) -> None:
    """All families on a candidate Megatron, then its drift: -- megatron-core==0.19.2 | a .whl | a tree | a git URL."""
    if not session.posargs or session.posargs[0].startswith("-"):
        session.error(
            f"name the candidate: {launcher()} -s candidate -- megatron-core==0.19.2 (or a .whl, a tree, a git+ URL)"
        )
    spec, pytest_args = session.posargs[0], session.posargs[1:]
    _one_subject(session)  # its drift and findings are one subject's
    if spec == "latest":
        _early_warning(session, pytest_args)
        return
    gate = _run_candidate(session, spec, pytest_args)
    if gate != 0:
        session.error(f"candidate {spec}: the gate is red (exit {gate}); reports/{candidates.SESSION}/ has the details")
    session.log(f"candidate {spec}: every family green")


def _run_candidate(session: nox.Session, spec: str, pytest_args: list[str], python: str | None = None) -> int:
    """Every family on the candidate ``spec`` (on ``python`` where given), then its drift and findings; returns the
    gate's exit status."""
    out = REPORTS / "candidate"
    try:
        found = candidates.resolve(spec, out)
        python = python or candidates.pick_python(found)
    except candidates.CandidateError as err:
        session.error(str(err))
    baseline = candidates.baseline_for(found.version, MATRIX.targets)
    shapes = candidates.release_at_or_below(found.version, MATRIX.targets)
    entry = candidates.matrix_entry(found, python, MATRIX.targets[-1], out / "expected_failures.txt", shapes)
    matrix = candidates.write_matrix(entry, out / "matrix.yaml")
    session.log(f"candidate {spec}: megatron-core {found.version or '(version unknown)'} on Python {python}")
    _nested_nox(session, ["-s", candidates.SESSION, "--install-only"], matrix)
    derived = _derived_contract(session, venv_python(ENVDIR, candidates.SESSION))
    if derived is not None:
        entry, notes = candidates.with_derived_contract(entry, derived, shapes.session)
        for note in notes:
            session.log(f"candidate: {note}")
        candidates.write_matrix(entry, matrix)
    gate = _nested_nox(session, ["-R", "-s", candidates.SESSION, "--", *pytest_args], matrix, check=False)
    if not venv_python(ENVDIR, baseline.session).exists():
        _nested_nox(session, ["-s", baseline.session, "--install-only"])
    session.log(f"drift of the candidate from {baseline.session}, the newest target of another version:")
    pythons = {s: venv_python(ENVDIR, s) for s in (baseline.session, candidates.SESSION)}
    # A red gate (a candidate whose Megatron does not import, say) keeps its verdict even if the drift cannot be read.
    _print_drift(session, pythons, fatal=gate == 0)
    for finding in _findings(REPORTS / candidates.SESSION):
        session.log(f"candidate finding ({finding['family']}): {finding['text']}")
    return gate


def _early_warning(session: nox.Session, pytest_args: list[str]) -> None:
    """``candidate -- latest``: per Python of the matrix, the newest megatron-core on the index against the newest
    matrix release; reports/candidate-latest/ holds the comparison, and the session fails when a case turned red."""
    release_target = MATRIX.targets[-1]
    try:
        builds = index_builds()
        release = find(builds, release_target.pinned_version() or "", default_index())
    except BuildIndexError as err:
        session.error(f"candidate latest: {err}")
    out = REPORTS / "candidate-latest"
    session.log(f"candidate latest: the newest matrix release is megatron-core {release.version}; its cases first")
    _nested_nox(session, ["-r", "-s", release_target.session, "--", *pytest_args], check=False)
    release_cases = read_cases(REPORTS / release_target.session / "junit.xml")
    sections = []
    for latest in early_warning.latest_per_python(builds, [t.python for t in MATRIX.targets]):
        if latest.build is None:
            sections.append(early_warning.no_build_section(latest.python))
            continue
        session.log(f"candidate latest: Python {latest.python}: megatron-core {latest.build.version} is the newest")
        _run_candidate(session, f"megatron-core=={latest.build.version}", pytest_args, python=latest.python)
        cases = read_cases(REPORTS / candidates.SESSION / "junit.xml")
        shutil.copytree(REPORTS / candidates.SESSION, out / f"python-{latest.python}", dirs_exist_ok=True)
        sections.append(early_warning.warning_section(latest.python, latest.build, release, cases, release_cases))
    markdown, page = bisect_report.write_reports(sections, out, early_warning.STEM, "Early warning")
    for section in sections:
        session.log(section.headline)
    session.log(f"the comparison: {markdown} and {page}")
    turned = [case for section in sections for case in section.cases]
    if turned:
        session.error(f"candidate latest: {len(turned)} cases turned red against {release.version} ({markdown})")


@nox.session(name="bisect", venv_backend="none")
def bisect_session(session: nox.Session) -> None:
    """Which build of megatron-core first turned cases red: -- <good> <bad> [case id ...] [--max-steps N]."""
    try:
        request = bisect_run.parse_request(session.posargs)
    except bisect_run.BisectError as err:
        session.error(f"{err} ({launcher()} {bisect_run.USAGE})")
    out = REPORTS / "bisect"
    step = GateStep(ROOT, ENVDIR, out, MATRIX.targets, request.index)
    try:
        result = bisect_run.run_bisect(request, step, _one_subject(session), session.log)
    except bisect_run.BisectError as err:
        session.error(str(err))
    section = bisect_report.bisect_section(result)
    markdown, page = bisect_report.write_reports([section], out, "bisect", section.title)
    session.log(section.headline)
    for diff in result.diffs:
        session.log(f"{diff.symbol} ({diff.role}):\n{diff.diff or '(unchanged)'}")
    session.log(f"bisect took {result.seconds:.0f} s; the report: {markdown} and {page}")


GPU_SELECTION = ("cases/test_equivalence.py", "-k", "cuda or nccl")
"""The CUDA cases: generated modules, the memory bound (with the patch-needed finding) and the real GPT step."""
GPU_UNIT_TESTS = ("tests/unit/test_allocations.py", "tests/unit/test_rank_pool.py", "-k", "cuda or gpu or nccl")
"""The harness's own checks that need a GPU: the allocator's block rules and the CUDA placements of the rank pool."""
GPU_BENCH = (
    *("--placement", "cuda", "--world-sizes", "2", "--populations-mib", "1024", "4096"),
    *("--budgets-mib", "256", "--tensors", "64", "--repeats", "2"),
)
"""The bench's CUDA mode sized for a few minutes on one GPU: 1 and 4 GiB of grads, upstream, the subject, the
field-style patch and the floor."""


@nox.session(python=KNOWN[NEWEST_TARGET].python)
def gpu(session: nox.Session) -> None:
    """On a GPU machine: every CUDA case on the newest target, then the bench's CUDA mode (reports/gpu/)."""
    target = KNOWN[NEWEST_TARGET]
    requirements = [*target.requirements(), *HARNESS_REQUIREMENTS, "matplotlib"]
    session.install(*install_command(requirements, session.venv_backend, target.python))
    probe = "from harness.ranks.placement import gpu_refusal, this_machine; print(gpu_refusal(this_machine()) or '')"
    refusal = (session.run("python", "-c", probe, silent=True) or "").strip()
    if refusal:
        session.error(refusal)
    out = REPORTS / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    cases = case_command(target.session, out / target.session, GPU_SELECTION, matrix=MATRIX.path, options=["-rs"])
    session.run(*cases)
    if (ROOT / "tests").is_dir():
        session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-rs", *GPU_UNIT_TESTS)
    session.run("python", "-m", "harness.bench.timing", "--out", str(out / "bench"), *GPU_BENCH)
    session.run("python", "-m", "harness.bench.report", str(out / "bench"), f"{launcher()} -s gpu")


def _findings(report_dir: Path) -> list[dict[str, str]]:
    """The findings a target session recorded (not verdicts: e.g. whether upstream still coalesces everything)."""
    try:
        return read_summary(report_dir).findings
    except (OSError, SummaryError):
        return []


BENCH_TARGET = "megatron-0.15"


def _time_gate(session: nox.Session, out: Path) -> None:
    """Wall time of the default targets' gate on built venvs, as a user runs it; writes ``gate.json``."""
    command = [launcher(), "-R", "-s", *DEFAULT_TARGETS]
    run = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-R", "-s", *DEFAULT_TARGETS]
    unbuilt = [name for name in DEFAULT_TARGETS if not venv_python(ENVDIR, name).exists()]
    if unbuilt:
        session.log(f"building {', '.join(unbuilt)} first, so that the timed run is warm")
        subprocess.run(run, cwd=ROOT, check=True)
    started = time.monotonic()
    completed = subprocess.run(run, cwd=ROOT)
    wall = time.monotonic() - started
    if completed.returncode != 0:
        session.error(f"the timed gate run failed (exit {completed.returncode}): {' '.join(command)}")
    profile = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
    document = {"command": " ".join(command), "wall_s": wall, "profile": profile}
    (out / "gate.json").write_text(json.dumps(document, indent=2) + "\n")
    session.log(f"warm gate: {wall:.0f} s")


@nox.session(python=KNOWN[BENCH_TARGET].python if BENCH_TARGET in KNOWN else None)
def bench(session: nox.Session) -> None:
    """Chunked vs upstream all-reduce on gloo, and the gate's costs: -- [--skip-gate] [harness.bench.timing options]."""
    if BENCH_TARGET not in KNOWN:
        session.error(f"the bench runs on {BENCH_TARGET}, which is not in {MATRIX.path.name}")
    target = KNOWN[BENCH_TARGET]
    requirements = [*target.requirements(), *HARNESS_REQUIREMENTS, "matplotlib"]
    session.install(*install_command(requirements, session.venv_backend, target.python))
    out = REPORTS / "bench"
    out.mkdir(parents=True, exist_ok=True)
    options = [a for a in session.posargs if a != "--skip-gate"]
    if "--skip-gate" in session.posargs:
        (out / "gate.json").unlink(missing_ok=True)
    else:
        _time_gate(session, out)
    session.run("python", "-m", "harness.bench.timing", "--out", str(out), *options)
    command = " ".join([f"{launcher()} -s bench", *(["--", *session.posargs] if session.posargs else [])])
    session.run("python", "-m", "harness.bench.report", str(out), command)
