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
from harness.plugin.families import family_of_case
from harness.plugin.subjects import REFERENCE_SUBJECT, SUBJECT_ENV_VAR, load_subject, subject_spec
from harness.targets.installed_versions import installed_versions, megatron_origin
from harness.targets.matrix import Matrix, Target, load_matrix

_TARGET_ENV_VAR = "MEGATRON_CONFORMANCE_TARGET"
_MATRIX_ENV_VAR = "MEGATRON_CONFORMANCE_MATRIX"
_REPORT_COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


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
    hypothesis_profiles.load_default(config)
    name = config.getoption("--target")
    if not name:
        raise pytest.UsageError(f"no target: pass --target <session> or set {_TARGET_ENV_VAR} (see matrix.yaml)")
    matrix = load_matrix(config.getoption("--matrix"))
    config.stash[_MATRIX] = matrix
    config.stash[_TARGET] = matrix.target(name)
    config.stash[_STARTED] = time.monotonic()
    config.stash[_STALE] = []
    if not hasattr(config, "workerinput"):
        shutil.rmtree(_report_dir(config) / _RECORDS_DIR, ignore_errors=True)


_MATRIX = pytest.StashKey[Matrix]()
_TARGET = pytest.StashKey[Target]()
_STARTED = pytest.StashKey[float]()
_STALE = pytest.StashKey[list]()
_RECORDS_DIR = "records"


def configured_target(config: pytest.Config) -> Target:
    """The target in force, for plugins that run beside this one."""
    return config.stash[_TARGET]


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    """The target this session runs against."""
    return pytestconfig.stash[_TARGET]


@pytest.fixture(scope="session")
def subject_name(pytestconfig: pytest.Config) -> str:
    """How the subject is named (module or path), for code that loads it again in rank processes."""
    return subject_spec(pytestconfig.getoption("--subject"))


@pytest.fixture(scope="session")
def subject(subject_name: str) -> ModuleType:
    """The subject under test, imported once per session."""
    return load_subject(subject_name)


@pytest.fixture(scope="session")
def report_dir(pytestconfig: pytest.Config) -> Path:
    """Where this session's reports go (shared by all xdist workers)."""
    return _report_dir(pytestconfig)


@pytest.fixture(scope="session")
def record_waiver(report_dir: Path) -> Callable[[str, str, str], None]:
    """Record that the subject's own declaration waived an effect (kind, name, the allowance that matched), so that
    ``summary.json`` and the report show every waiver a green relied on."""

    def record(kind: str, name: str, allowed_by: str) -> None:
        _append_record(report_dir, "waivers", {"kind": kind, "name": name, "allowed_by": allowed_by})

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = config.stash[_TARGET]
    prefixes = expected_failures.read(target.expected_failures)
    config.stash[_STALE] = expected_failures.apply(prefixes, items, target.expected_failures)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    config = node.config
    prefixes = expected_failures.read(config.stash[_TARGET].expected_failures)
    config.stash[_STALE] = expected_failures.stale(prefixes, ids)


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
    section = RedSection(target.session, contract, symbol, _repro_command(item.config, report.nodeid))
    report.longrepr.addsection(SECTION_TITLE, section.text())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    target = config.stash[_TARGET]
    report_dir = _report_dir(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    counts = {key: len(stats.get(key, [])) for key in _REPORT_COUNTS}
    summary = {
        "target": target.session,
        "subject": subject_spec(config.getoption("--subject")),
        "pins": {
            "megatron": target.megatron.location,
            "torch": str(target.torch),
            "numpy": str(target.numpy) if target.numpy else None,
            "python": target.python,
        },
        "installed": installed_versions(),
        "megatron_origin": megatron_origin(),
        "counts": counts,
        "stale_expected_failures": config.stash[_STALE],
        "waivers": _records(report_dir, "waivers"),
        "findings": _records(report_dir, "findings"),
        "exit_status": int(exitstatus),
        "wall_time_s": round(time.monotonic() - config.stash[_STARTED], 2),
    }
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    waivers = _records(_report_dir(config), "waivers") if _TARGET in config.stash else []
    if waivers:
        terminalreporter.write_sep("-", "effects the subject's declaration waived")
        for waiver in waivers:
            terminalreporter.write_line(f"{waiver['kind']} {waiver['name']} (allowed by {waiver['allowed_by']!r})")
    findings = _records(_report_dir(config), "findings") if _TARGET in config.stash else []
    if findings:
        terminalreporter.write_sep("-", "findings")
        for finding in findings:
            terminalreporter.write_line(f"{finding['family']}: {finding['text']}")
    stale = config.stash.get(_STALE, [])
    if stale:
        terminalreporter.write_sep("-", "stale expected failures")
        for prefix in stale:
            terminalreporter.write_line(f"{config.stash[_TARGET].expected_failures}: {prefix!r} matches no test")
