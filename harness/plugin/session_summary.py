"""The end of a target session: ``summary.json`` written from what the session had in force and recorded, and the
terminal's closing sections (waivers, findings, advisories, stale expected failures)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.environment import is_default_matrix
from harness.formats.summary import COUNTED, SessionSummary
from harness.plugin import session_state
from harness.plugin.records import read_records
from harness.targets.installed_versions import installed_versions, megatron_origin


def session_summary(
    config: pytest.Config,
    stats: dict[str, list[Any]],
    exit_status: int,
    started: float,
    stale: list[str],
    family_seconds: dict[str, float],
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
        selection=_selection(config),
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
    )


def write_terminal_sections(terminalreporter: Any, report_dir: Path, stale: list[tuple[str, str]]) -> None:
    """The closing sections: what the declaration waived, findings, advisories with their repro lines, stale
    expected failures."""
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


def _selection(config: pytest.Config) -> list[str] | None:
    """What narrowed the run (node ids, ``-k``, ``-m``); ``None`` when every case of ``cases/`` ran."""
    cases = (REPO_ROOT / "cases").resolve()
    narrowed = [arg for arg in config.args if Path(arg).resolve() != cases]
    if config.option.keyword:
        narrowed.append(f"-k {config.option.keyword}")
    if config.option.markexpr:
        narrowed.append(f"-m {config.option.markexpr}")
    return narrowed or None
