"""The end of a target session: ``summary.json`` written from what the session had in force and recorded, and the
terminal's closing sections (waivers, findings, advisories, stale expected failures)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.environment import is_default_matrix
from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.formats.summary import COUNTED, SessionSummary
from harness.plugin import session_state
from harness.plugin.blockers import BLOCKERS, Blocker
from harness.plugin.families import FAMILIES, family_of_case
from harness.plugin.records import read_records
from harness.targets.installed_versions import installed_versions, megatron_origin

NOTHING_CHECKED = "nothing of the subject was checked: every family selected is blocked or skipped"
_RAN = ("passed", "failed", "error", "xfailed", "xpassed")
"""Terminal statistics of a case that checked something (a skip checked nothing)."""
NOT_SELECTED = "not selected in this run"


def families_not_run(stats: dict[str, list[Any]], blockers: list[Blocker]) -> dict[str, str]:
    """Each family that checked nothing, with why: the blocker that stood in its place, the reason its cases were
    skipped for (the first one, and how many others), or that none of its cases was selected."""
    ran: set[str] = set()
    skipped: dict[str, list[str]] = {}
    for category, reports in stats.items():
        for report in reports:
            owner = family_of_case(getattr(report, "nodeid", ""))
            if owner is None:
                continue
            if category in _RAN:
                ran.add(owner.name)
            elif category == "skipped":
                skipped.setdefault(owner.name, []).append(_skip_reason(report))
    not_run = {}
    for owner in FAMILIES:
        blocker = next((b for b in blockers if b.blocks(owner)), None)
        if blocker is not None and owner.name in ran:
            not_run[owner.name] = f"blocked: {blocker.what}"
        elif owner.name in ran:
            continue
        elif owner.name in skipped:
            reasons = list(dict.fromkeys(skipped[owner.name]))
            more = f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
            not_run[owner.name] = f"every case skipped: {reasons[0]}{more}"
        else:
            not_run[owner.name] = NOT_SELECTED
    return not_run


def nothing_checked(not_run: dict[str, str]) -> bool:
    """Whether the run selected families that check the subject and none of them checked anything (smoke checks
    the pins, not the subject: a run narrowed to smoke alone checks what it was asked to)."""
    of_subject = [owner.name for owner in FAMILIES if owner.name != "smoke"]
    selected = [name for name in of_subject if not_run.get(name) != NOT_SELECTED]
    return bool(selected) and all(name in not_run for name in of_subject)


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").splitlines()[0]


def session_summary(
    config: pytest.Config,
    stats: dict[str, list[Any]],
    exit_status: int,
    started: float,
    stale: list[str],
    family_seconds: dict[str, float],
    not_run: dict[str, str],
    gate_errors: dict[str, str],
) -> SessionSummary:
    """What this session records about itself, from pytest's terminal statistics and the session's records."""
    target = session_state.configured_target(config)
    matrix = session_state.configured_matrix(config).path
    report_dir = session_state.report_dir_of(config)
    subject = session_state.subject_ref_of(config)
    declaration = subject.declaration
    return SessionSummary(
        target=target.session,
        subject=subject.spec,
        subject_kind=subject.kind,
        subject_label=declaration.label if declaration is not None else None,
        declaration_lines=declaration.lines if declaration is not None else None,
        matrix=None if is_default_matrix(matrix) else str(matrix),
        selection=selection(config),
        pins={
            "megatron": target.megatron.location,
            "torch": str(target.torch),
            "numpy": str(target.numpy) if target.numpy else None,
            "python": target.python,
        },
        installed=installed_versions(),
        megatron_origin=megatron_origin(),
        counts={key: len(stats.get(key, [])) for key in COUNTED},
        stale_expected_failures=stale,
        waivers=read_records(report_dir, "waivers"),
        advisories=read_records(report_dir, "advisories"),
        findings=read_records(report_dir, "findings"),
        exit_status=exit_status,
        wall_time_s=round(time.monotonic() - started, 2),
        family_seconds={name: round(seconds, 2) for name, seconds in sorted(family_seconds.items())},
        blocked=[blocker.what for blocker in config.stash.get(BLOCKERS, [])],
        not_run=not_run,
        gate_errors=[{"case": case, "text": text} for case, text in gate_errors.items()],
    )


def write_terminal_sections(
    terminalreporter: Any,
    report_dir: Path,
    stale: list[tuple[str, str]],
    not_run: dict[str, str],
    gate_errors: dict[str, str],
) -> None:
    """The closing sections: what the declaration waived, findings, advisories with their repro lines, stale
    expected failures, the families that did not run, and last the gate's own errors, which decide the status."""
    waivers = read_records(report_dir, "waivers")
    if waivers:
        terminalreporter.write_sep("-", "effects the subject's declaration waived")
        for waiver in waivers:
            detail = f": {waiver['detail']}" if waiver.get("detail") else ""
            terminalreporter.write_line(
                f"{waiver['kind']} {waiver['name']}{detail} (allowed by {waiver['allowed_by']!r})"
            )
    findings = read_records(report_dir, "findings")
    if findings:
        terminalreporter.write_sep("-", "findings")
        for finding in findings:
            terminalreporter.write_line(f"{finding['family']}: {finding['text']}")
    advisories = read_records(report_dir, "advisories")
    if advisories:
        title = "advisories (properties a correct adapter need not have; not reds)"
        terminalreporter.write_sep("-", title, yellow=True)
        for advisory in advisories:
            terminalreporter.write_line(f"{advisory['family']}: {advisory['text']}", yellow=True)
            terminalreporter.write_line(f"    {advisory['repro']}")
    if stale:
        terminalreporter.write_sep("-", "stale expected failures")
        for source, prefix in stale:
            terminalreporter.write_line(f"{source}: {prefix!r} matches no test")
    if not_run:
        terminalreporter.write_sep("-", "families that did not run", yellow=True)
        for name, why in not_run.items():
            if why != NOT_SELECTED:
                terminalreporter.write_line(f"{name}: {why}", yellow=True)
        unselected = [name for name, why in not_run.items() if why == NOT_SELECTED]
        if unselected:
            terminalreporter.write_line(f"{NOT_SELECTED}: {', '.join(unselected)}", yellow=True)
        if nothing_checked(not_run):
            terminalreporter.write_line(f"{NOTHING_CHECKED} (exit 1)", red=True, bold=True)
    if gate_errors:
        terminalreporter.write_sep("-", f"the gate's own errors (exit {GATE_ERROR_STATUS})", red=True)
        for case, line in gate_errors.items():
            terminalreporter.write_line(f"{case}: {line}", red=True, bold=True)


def selection(config: pytest.Config) -> list[str] | None:
    """What narrowed the run (node ids, ``-k``, ``-m``); ``None`` when every case of ``cases/`` ran."""
    cases = (REPO_ROOT / "cases").resolve()
    narrowed = [arg for arg in config.args if Path(arg).resolve() != cases]
    if config.option.keyword:
        narrowed.append(f"-k {config.option.keyword}")
    if config.option.markexpr:
        narrowed.append(f"-m {config.option.markexpr}")
    return narrowed or None
