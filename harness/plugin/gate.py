"""The pytest plugin every target session runs the cases with.

Loaded with ``-p harness.plugin.gate`` by the one case command (:mod:`harness.plugin.command`). It owns what is
common to all cases: the options, which target and subject are in force (:mod:`harness.plugin.session_state`), the
fixtures, expected failures, "not declared" skips, what a failed case becomes (:mod:`harness.plugin.verdicts`) and
the session's end (:mod:`harness.plugin.session_summary`). Case modules only assert their contract.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.formats.environment import DEFAULT_MATRIX, MATRIX_ENV_VAR, SUBJECT_ENV_VAR, TARGET_ENV_VAR
from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.formats.not_declared import not_declared_reason
from harness.formats.red_section import RedSection
from harness.plugin import expected_failures, generator_failures, hypothesis_profiles, session_state, verdicts
from harness.plugin.blockers import (
    BLOCKERS,
    Blocker,
    megatron_blocker,
    replace_blocked,
    subject_blocker,
    subject_load_error,
)
from harness.plugin.failure import contract_failure
from harness.plugin.families import Family, UnknownFamily, family, family_of_case
from harness.plugin.install_findings import record_install_findings
from harness.plugin.records import append_record, clear_records
from harness.plugin.scale_estimate import record_scale_findings
from harness.plugin.session_summary import (
    families_not_run,
    nothing_checked,
    selection,
    session_summary,
    write_terminal_sections,
)
from harness.subjects.declaration import Declaration, DeclarationFileError
from harness.subjects.loading import SubjectError, SubjectRef
from harness.targets.matrix import Target, load_matrix


def pytest_addoption(parser: pytest.Parser) -> None:
    hypothesis_profiles.register()
    group = parser.getgroup("megatron-conformance")
    group.addoption("--target", default=os.environ.get(TARGET_ENV_VAR), help="session name of the target in force")
    group.addoption(
        "--matrix",
        default=os.environ.get(MATRIX_ENV_VAR, str(DEFAULT_MATRIX)),
        help="matrix file that defines the target",
    )
    group.addoption("--subject", default=None, help=f"subject module or .py path (default: ${SUBJECT_ENV_VAR})")
    group.addoption("--report-dir", default=None, help="where summary.json goes (default: reports/<target>)")


_STARTED = pytest.StashKey[float]()
_STALE = pytest.StashKey[list]()
_NOT_RUN = pytest.StashKey[dict]()
_gate_errors: dict[str, str] = {}
"""Each case the gate's own example generator broke this session, with its line (the controller's view)."""
_family_seconds: dict[str, float] = {}
"""Seconds of setup, call and teardown per family this session, summed over its cases (under xdist the controller
sees every worker's reports); cases outside the families count under ``other``."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "contract(name, symbol): the contract and subject symbol a case checks")
    config.addinivalue_line(
        "markers",
        "advisory(forecast=False): a property a correct adapter need not have; reported apart unless the subject is "
        "strict. forecast=True: about what other targets do, never a red on this one",
    )
    config.addinivalue_line("markers", "role(name): the declared role a case needs besides its family's")
    config.addinivalue_line(
        "markers",
        "from_source: a case that reads the framework's source and Megatron's, never the loaded subject: it runs where "
        "the subject cannot be loaded, and without its family's declared role",
    )
    hypothesis_profiles.load_default(config)
    name = config.getoption("--target")
    if not name:
        raise pytest.UsageError(f"no target: pass --target <session> or set {TARGET_ENV_VAR} (see matrix.yaml)")
    matrix = load_matrix(config.getoption("--matrix"))
    config.stash[session_state.MATRIX] = matrix
    config.stash[session_state.TARGET] = matrix.target(name)
    config.stash[_STARTED] = time.monotonic()
    config.stash[_STALE] = []
    _family_seconds.clear()
    _gate_errors.clear()
    if not hasattr(config, "workerinput"):
        clear_records(session_state.report_dir_of(config))
    try:
        declaration = session_state.subject_ref_of(config).declaration
    except (DeclarationFileError, SubjectError) as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[BLOCKERS] = []
    if declaration is not None:
        # A declared subject is built now (it imports Megatron): Megatron first, so its failure is named as its own.
        _block_on_megatron_or_subject(config)
        config.stash[BLOCKERS] += _required_but_missing(declaration)


def _block_on_megatron_or_subject(config: pytest.Config, subject: bool = True) -> None:
    """Stash the blocker of a Megatron that cannot be imported, else (with ``subject``) of a subject that cannot be
    loaded: a declared subject is built here (the session needs it built), a module subject is loaded in a forked
    child only."""
    blocker = megatron_blocker()
    if blocker is None and subject and session_state.declaration_of(config) is not None:
        try:
            session_state.configured_subject(config)
        except Exception as err:
            blocker = subject_blocker(err)
    elif blocker is None and subject:
        error = subject_load_error(session_state.subject_ref_of(config))
        blocker = subject_blocker(error) if error else None
    if blocker is not None:
        config.stash[BLOCKERS].append(blocker)


def _required_but_missing(declaration: Declaration) -> list[Blocker]:
    """A blocker per family the declaration requires whose role it leaves empty; an unknown family name is a usage
    error naming the key."""
    blockers = []
    for name in declaration.require:
        try:
            role = family(name).missing_role(declaration)
        except UnknownFamily as err:
            raise pytest.UsageError(str(declaration.fail("subject.require", str(err)))) from None
        if role:
            what = f"{declaration.path} requires {name} (subject.require) but declares no [{role}]"
            blockers.append(Blocker(what, families=(name,), subject_free=False))
    return blockers


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    line = generator_failures.line_of(report)
    if line is not None:
        _gate_errors[report.nodeid] = line
    owner = family_of_case(report.nodeid)
    name = owner.name if owner else "other"
    _family_seconds[name] = _family_seconds.get(name, 0.0) + report.duration


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    """The target this session runs against."""
    return session_state.configured_target(pytestconfig)


@pytest.fixture(scope="session")
def subject_ref(pytestconfig: pytest.Config) -> SubjectRef:
    """The subject as the session named it, resolved once: what rank processes receive to load it themselves."""
    return session_state.subject_ref_of(pytestconfig)


@pytest.fixture(scope="session")
def subject(pytestconfig: pytest.Config) -> ModuleType:
    """The subject under test, imported once per session (a declared subject when the session was configured)."""
    return session_state.configured_subject(pytestconfig)


@pytest.fixture(scope="session")
def report_dir(pytestconfig: pytest.Config) -> Path:
    """Where this session's reports go (shared by all xdist workers)."""
    return session_state.report_dir_of(pytestconfig)


@pytest.fixture(scope="session")
def record_waiver(report_dir: Path) -> Callable[..., None]:
    """Record that the subject's own declaration waived an effect (kind, name, the allowance that matched, and what
    happened: an ``env-read``'s file and line), so that ``summary.json`` and the report show every waiver a green
    relied on, and where to look."""

    def record(kind: str, name: str, allowed_by: str, detail: str = "") -> None:
        entry = {"kind": kind, "name": name, "allowed_by": allowed_by}
        append_record(report_dir, "waivers", {**entry, "detail": detail} if detail else entry)

    return record


@pytest.fixture(scope="session")
def record_finding(report_dir: Path) -> Callable[[str, str], None]:
    """Record a finding about the target that is no verdict (``family``, one line), e.g. whether upstream still
    coalesces what the subject chunks; ``summary.json`` and the report carry it."""

    def record(family: str, text: str) -> None:
        append_record(report_dir, "findings", {"family": family, "text": text})

    return record


def _expected_failures(config: pytest.Config) -> list[tuple[str, list[str]]]:
    """``(source, prefixes)`` per file that lists expected failures: the target's, and the subject declaration's
    entry for this target."""
    target = session_state.configured_target(config)
    sources = [(str(target.expected_failures), expected_failures.read(target.expected_failures))]
    declaration = session_state.declaration_of(config)
    if declaration is not None and target.session in declaration.expected_failures:
        where = f"{declaration.path} [expected_failures] {target.session}"
        sources.append((where, list(declaration.expected_failures[target.session])))
    return sources


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, Any, None]:
    """Before every other plugin: expected failures and "not declared" skips, on every collected case. After them
    (deselection done, the fork server started): a red per family a blocker blocks, in place of its cases."""
    config.stash[_STALE] = [
        (source, prefix)
        for source, prefixes in _expected_failures(config)
        for prefix in expected_failures.apply(prefixes, items, source)
    ]
    declaration = session_state.declaration_of(config)
    if declaration is not None:
        for item in items:
            missing = _undeclared_role(declaration, item)
            if missing:
                item.add_marker(pytest.mark.skip(reason=missing))
    yield
    blockers = config.stash[BLOCKERS]
    if not blockers and items:
        # A declared subject was built at configure time; a module subject is tried now, where a case needs it.
        _block_on_megatron_or_subject(config, declaration is None and any(_needs_subject(item) for item in items))
    if blockers:
        replace_blocked(items, blockers, lambda owner, what: _blocked_text(config, owner, what))


def _blocked_text(config: pytest.Config, owner: Family, what: str) -> str:
    """The red of a blocked family: its head, then the red section whose repro line re-runs the family's case file."""
    target = session_state.configured_target(config)
    repro = verdicts.repro_command(config, owner.case_file)
    section = RedSection(target.session, owner.name, owner.symbol, repro)
    return f"{contract_failure(target, owner.name, what)}\n\n{section.text()}"


def _needs_subject(item: pytest.Item) -> bool:
    owner = family_of_case(item.nodeid)
    return owner is not None and owner.name != "smoke"


def _undeclared_role(declaration: Declaration, item: pytest.Item) -> str | None:
    """``not declared: ...`` when the case needs a role the declaration does not declare; such a case never runs and
    never counts as green."""
    owner = family_of_case(item.nodeid)
    roles = [owner.missing_role(declaration)] if owner and not item.get_closest_marker("from_source") else []
    roles += [marker.args[0] for marker in item.iter_markers("role") if not getattr(declaration, marker.args[0])]
    role = next((r for r in roles if r), None)
    if role is None:
        return None
    return not_declared_reason(owner.name if owner else item.nodeid, role, declaration.path)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    config = node.config
    config.stash[_STALE] = [
        (source, prefix)
        for source, prefixes in _expected_failures(config)
        for prefix in expected_failures.stale(prefixes, ids)
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """A hypothesis case that would be recorded as an advisory stops at its first failing example."""
    if not verdicts.recorded_as_advisory(item):
        yield
        return
    with hypothesis_profiles.advisory_settings(getattr(item, "obj", None)):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    error = generator_failures.gate_error(call) if report.failed else None
    if error is not None:
        generator_failures.mark(report, error, verdicts.repro_command(item.config, report.nodeid))
    elif report.failed and hasattr(report.longrepr, "addsection"):
        verdicts.judge(item, report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    subject = session_state.subject_ref_of(config)
    narrowed = selection(config) is not None
    record_scale_findings(session_state.report_dir_of(config), subject.declaration, subject.spec, narrowed)
    record_install_findings(session_state.report_dir_of(config))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    not_run = config.stash[_NOT_RUN] = families_not_run(stats, config.stash.get(BLOCKERS, []))
    if nothing_checked(not_run) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _gate_errors:
        session.exitstatus = GATE_ERROR_STATUS
    stale = [prefix for _, prefix in config.stash[_STALE]]
    summary = session_summary(
        config, stats, int(session.exitstatus), config.stash[_STARTED], stale, _family_seconds, not_run, _gate_errors
    )
    summary.write(session_state.report_dir_of(config))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if session_state.TARGET in config.stash:
        write_terminal_sections(
            terminalreporter,
            session_state.report_dir_of(config),
            config.stash.get(_STALE, []),
            config.stash.get(_NOT_RUN, {}),
            _gate_errors,
        )
