"""The pytest plugin every target session runs the cases with.

Loaded with ``-p harness.plugin.gate`` by the one case command (:mod:`harness.plugin.command`). It owns what is
common to all cases: which target and subject are in force, expected failures, the one-line repro
attached to every red, and ``reports/<session>/summary.json``. Case modules only assert their contract.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.red_section import TITLE as SECTION_TITLE
from harness.formats.red_section import RedSection, repro_line
from harness.plugin import expected_failures, hypothesis_profiles
from harness.plugin.declaration import Declaration, DeclarationFileError, is_declaration
from harness.plugin.families import family_of_case
from harness.plugin.subjects import (
    REFERENCE_SUBJECT,
    SUBJECT_ENV_VAR,
    SubjectError,
    load_subject,
    subject_spec,
)
from harness.targets.installed_versions import installed_versions, megatron_origin
from harness.targets.matrix import Matrix, Target, load_matrix

_TARGET_ENV_VAR = "MEGATRON_CONFORMANCE_TARGET"
_MATRIX_ENV_VAR = "MEGATRON_CONFORMANCE_MATRIX"
_REPORT_COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
NOT_DECLARED = "not declared"


def pytest_addoption(parser: pytest.Parser) -> None:
    hypothesis_profiles.register()
    group = parser.getgroup("megatron-conformance")
    group.addoption("--target", default=os.environ.get(_TARGET_ENV_VAR), help="session name of the target in force")
    group.addoption(
        "--matrix",
        default=os.environ.get(_MATRIX_ENV_VAR, str(REPO_ROOT / "matrix.yaml")),
        help="matrix file that defines the target",
    )
    group.addoption("--subject", default=None, help=f"subject module or .py path (default: ${SUBJECT_ENV_VAR})")
    group.addoption("--report-dir", default=None, help="where summary.json goes (default: reports/<target>)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "contract(name, symbol): the contract and subject symbol a case checks")
    config.addinivalue_line(
        "markers",
        "advisory(forecast=False): a property a correct adapter need not have; reported apart unless the subject is "
        "strict. forecast=True: about what other targets do, never a red on this one",
    )
    config.addinivalue_line("markers", "role(name): the declared role a case needs besides its family's")
    hypothesis_profiles.load_default(config)
    name = config.getoption("--target")
    if not name:
        raise pytest.UsageError(f"no target: pass --target <session> or set {_TARGET_ENV_VAR} (see matrix.yaml)")
    matrix = load_matrix(config.getoption("--matrix"))
    config.stash[_MATRIX] = matrix
    config.stash[_TARGET] = matrix.target(name)
    config.stash[_STARTED] = time.monotonic()
    config.stash[_STALE] = []
    _family_seconds.clear()
    if not hasattr(config, "workerinput"):
        shutil.rmtree(_report_dir(config) / _RECORDS_DIR, ignore_errors=True)
    spec = subject_spec(config.getoption("--subject"))
    if is_declaration(spec):
        try:
            config.stash[_SUBJECT] = load_subject(spec)
        except (DeclarationFileError, SubjectError) as err:
            raise pytest.UsageError(str(err)) from None


_MATRIX = pytest.StashKey[Matrix]()
_TARGET = pytest.StashKey[Target]()
_STARTED = pytest.StashKey[float]()
_STALE = pytest.StashKey[list]()
_SUBJECT = pytest.StashKey[ModuleType]()
_RECORDS_DIR = "records"
_family_seconds: dict[str, float] = {}
"""Seconds of setup, call and teardown per family this session, summed over its cases (under xdist the controller
sees every worker's reports); cases outside the families count under ``other``."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    owner = family_of_case(report.nodeid)
    name = owner.name if owner else "other"
    _family_seconds[name] = _family_seconds.get(name, 0.0) + report.duration


def configured_target(config: pytest.Config) -> Target:
    """The target in force, for plugins that run beside this one."""
    return config.stash[_TARGET]


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    """The target this session runs against."""
    return pytestconfig.stash[_TARGET]


@pytest.fixture(scope="session")
def subject_name(pytestconfig: pytest.Config) -> str:
    """How the subject is named (module, or path made absolute), for code that loads it again in rank processes or
    from another working directory."""
    return _subject_name(pytestconfig)


def _subject_name(config: pytest.Config) -> str:
    spec = subject_spec(config.getoption("--subject"))
    return str(Path(spec).resolve()) if Path(spec).exists() else spec


@pytest.fixture(scope="session")
def subject(pytestconfig: pytest.Config, subject_name: str) -> ModuleType:
    """The subject under test, imported once per session (a declared subject when the session was configured)."""
    if _SUBJECT not in pytestconfig.stash:
        pytestconfig.stash[_SUBJECT] = load_subject(subject_name)
    return pytestconfig.stash[_SUBJECT]


def declaration_of(config: pytest.Config) -> Declaration | None:
    """The declaration the subject was built from; ``None`` for a module subject."""
    subject = config.stash.get(_SUBJECT, None)
    return getattr(subject, "DECLARATION", None)


@pytest.fixture(scope="session")
def report_dir(pytestconfig: pytest.Config) -> Path:
    """Where this session's reports go (shared by all xdist workers)."""
    return _report_dir(pytestconfig)


@pytest.fixture(scope="session")
def record_waiver(report_dir: Path) -> Callable[..., None]:
    """Record that the subject's own declaration waived an effect (kind, name, the allowance that matched, and what
    happened: an ``env-read``'s file and line), so that ``summary.json`` and the report show every waiver a green
    relied on, and where to look."""

    def record(kind: str, name: str, allowed_by: str, detail: str = "") -> None:
        entry = {"kind": kind, "name": name, "allowed_by": allowed_by}
        _append_record(report_dir, "waivers", {**entry, "detail": detail} if detail else entry)

    return record


@pytest.fixture(scope="session")
def record_finding(report_dir: Path) -> Callable[[str, str], None]:
    """Record a finding about the target that is no verdict (``family``, one line), e.g. whether upstream still
    coalesces what the subject chunks; ``summary.json`` and the report carry it."""

    def record(family: str, text: str) -> None:
        _append_record(report_dir, "findings", {"family": family, "text": text})

    return record


def _append_record(report_dir: Path, kind: str, entry: dict[str, str]) -> None:
    """Each process appends to its own file (xdist workers share the report directory); the session's end merges."""
    path = report_dir / _RECORDS_DIR / kind / f"{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        stream.write(json.dumps(entry) + "\n")


def _records(report_dir: Path, kind: str) -> list[dict[str, str]]:
    """Every record of ``kind`` made in this session, once each, sorted."""
    seen = {
        tuple(sorted(json.loads(line).items()))
        for path in (report_dir / _RECORDS_DIR / kind).glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    }
    return [dict(entry) for entry in sorted(seen)]


def _report_dir(config: pytest.Config) -> Path:
    target = config.stash[_TARGET]
    path = Path(config.getoption("--report-dir") or REPO_ROOT / "reports" / target.session)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _expected_failures(config: pytest.Config) -> list[tuple[str, list[str]]]:
    """``(source, prefixes)`` per file that lists expected failures: the target's, and the subject declaration's
    entry for this target."""
    target = config.stash[_TARGET]
    sources = [(str(target.expected_failures), expected_failures.read(target.expected_failures))]
    declaration = declaration_of(config)
    if declaration is not None and target.session in declaration.expected_failures:
        where = f"{declaration.path} [expected_failures] {target.session}"
        sources.append((where, list(declaration.expected_failures[target.session])))
    return sources


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_STALE] = [
        (source, prefix)
        for source, prefixes in _expected_failures(config)
        for prefix in expected_failures.apply(prefixes, items, source)
    ]
    declaration = declaration_of(config)
    if declaration is not None:
        for item in items:
            missing = _undeclared_role(declaration, item)
            if missing:
                item.add_marker(pytest.mark.skip(reason=missing))


def _undeclared_role(declaration: Declaration, item: pytest.Item) -> str | None:
    """``not declared: ...`` when the case needs a role the declaration does not declare; such a case never runs and
    never counts as green."""
    owner = family_of_case(item.nodeid)
    roles = [declaration.undeclared_role_of(owner.name)] if owner else []
    roles += [marker.args[0] for marker in item.iter_markers("role") if not getattr(declaration, marker.args[0])]
    role = next((r for r in roles if r), None)
    if role is None:
        return None
    family_name = owner.name if owner else item.nodeid
    return f"{NOT_DECLARED}: {family_name} needs [{role}] in {declaration.path}"


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    config = node.config
    config.stash[_STALE] = [
        (source, prefix)
        for source, prefixes in _expected_failures(config)
        for prefix in expected_failures.stale(prefixes, ids)
    ]


def _repro_command(config: pytest.Config, nodeid: str) -> str:
    """The shell line that re-runs one case on this target with this subject, from this matrix file (a candidate's
    matrix is generated, so its path is part of the command)."""
    environment = {}
    spec = subject_spec(config.getoption("--subject"))
    if spec != REFERENCE_SUBJECT:
        environment[SUBJECT_ENV_VAR] = spec
    matrix = config.stash[_MATRIX].path
    if matrix != (REPO_ROOT / "matrix.yaml").resolve():
        environment[_MATRIX_ENV_VAR] = str(matrix)
    return repro_line(config.stash[_TARGET].session, nodeid, environment)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not hasattr(report.longrepr, "addsection"):
        return
    marker = item.get_closest_marker("contract")
    owner = family_of_case(report.nodeid)
    contract = marker.args[0] if marker else (owner.name if owner else item.module.__name__.rsplit(".", 1)[-1])
    symbol = marker.kwargs.get("symbol", "-") if marker else (owner.symbol if owner else "-")
    target = item.config.stash[_TARGET]
    repro = _repro_command(item.config, report.nodeid)
    advisory = item.get_closest_marker("advisory")
    forecast = advisory is not None and advisory.kwargs.get("forecast", False)
    if report.when == "call" and advisory and (forecast or not _strict(item.config)):
        _record_advisory(item.config, contract, report, repro)
        return
    section = RedSection(target.session, contract, symbol, repro)
    report.longrepr.addsection(SECTION_TITLE, section.text())


def _strict(config: pytest.Config) -> bool:
    """Whether advisories are reds: a declaration's ``strict``; a module subject's ``STRICT`` (default true)."""
    declaration = declaration_of(config)
    if declaration is not None:
        return declaration.strict
    if _SUBJECT not in config.stash:
        try:
            config.stash[_SUBJECT] = load_subject(_subject_name(config))
        except Exception:
            return True  # a subject that cannot be loaded here is judged as strictly as any module subject
    return bool(getattr(config.stash[_SUBJECT], "STRICT", True))


def _record_advisory(config: pytest.Config, family_name: str, report: pytest.TestReport, repro: str) -> None:
    """Turn an advisory's failure into a pass with a record: ``summary.json``, the terminal and the report show it
    in its own colour, with the same repro line as a red."""
    message = getattr(report.longrepr, "reprcrash", None)
    lines = [line.strip() for line in (message.message if message else str(report.longrepr)).splitlines()]
    lines = [
        line.removeprefix("Failed: ").removeprefix("AssertionError: ")
        for line in lines
        if line and not line.startswith("assert ")
    ]
    head = lines[0] if lines else "advisory property"
    first = f"{head} {lines[1]}" if head.endswith(":") and len(lines) > 1 else head
    report.outcome = "passed"
    report.longrepr = None
    _append_record(
        _report_dir(config),
        "advisories",
        {
            "family": family_name,
            "case": report.nodeid,
            "text": first,
            "repro": repro,
        },
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    target = config.stash[_TARGET]
    report_dir = _report_dir(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    counts = {key: len(stats.get(key, [])) for key in _REPORT_COUNTS}
    declaration = declaration_of(config)
    summary = {
        "target": target.session,
        "subject": subject_spec(config.getoption("--subject")),
        "subject_kind": "declaration" if declaration is not None else "module",
        "subject_label": declaration.label if declaration is not None else None,
        "declaration_lines": declaration.lines if declaration is not None else None,
        "selection": _selection(config),
        "pins": {
            "megatron": target.megatron.location,
            "torch": str(target.torch),
            "numpy": str(target.numpy) if target.numpy else None,
            "python": target.python,
        },
        "installed": installed_versions(),
        "megatron_origin": megatron_origin(),
        "counts": counts,
        "stale_expected_failures": [prefix for _, prefix in config.stash[_STALE]],
        "waivers": _records(report_dir, "waivers"),
        "advisories": _records(report_dir, "advisories"),
        "findings": _records(report_dir, "findings"),
        "exit_status": int(exitstatus),
        "wall_time_s": round(time.monotonic() - config.stash[_STARTED], 2),
        "family_seconds": {name: round(seconds, 2) for name, seconds in sorted(_family_seconds.items())},
    }
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    waivers = _records(_report_dir(config), "waivers") if _TARGET in config.stash else []
    if waivers:
        terminalreporter.write_sep("-", "effects the subject's declaration waived")
        for waiver in waivers:
            detail = f": {waiver['detail']}" if waiver.get("detail") else ""
            terminalreporter.write_line(
                f"{waiver['kind']} {waiver['name']}{detail} (allowed by {waiver['allowed_by']!r})"
            )
    findings = _records(_report_dir(config), "findings") if _TARGET in config.stash else []
    if findings:
        terminalreporter.write_sep("-", "findings")
        for finding in findings:
            terminalreporter.write_line(f"{finding['family']}: {finding['text']}")
    advisories = _records(_report_dir(config), "advisories") if _TARGET in config.stash else []
    if advisories:
        title = "advisories (properties a correct adapter need not have; not reds)"
        terminalreporter.write_sep("-", title, yellow=True)
        for advisory in advisories:
            terminalreporter.write_line(f"{advisory['family']}: {advisory['text']}", yellow=True)
            terminalreporter.write_line(f"    {advisory['repro']}")
    stale = config.stash.get(_STALE, [])
    if stale:
        terminalreporter.write_sep("-", "stale expected failures")
        for source, prefix in stale:
            terminalreporter.write_line(f"{source}: {prefix!r} matches no test")


def _selection(config: pytest.Config) -> list[str] | None:
    """What narrowed the run (node ids, ``-k``, ``-m``); ``None`` when every case of ``cases/`` ran."""
    cases = (REPO_ROOT / "cases").resolve()
    narrowed = [arg for arg in config.args if Path(arg).resolve() != cases]
    if config.option.keyword:
        narrowed.append(f"-k {config.option.keyword}")
    if config.option.markexpr:
        narrowed.append(f"-m {config.option.markexpr}")
    return narrowed or None
