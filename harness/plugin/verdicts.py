"""What a failed case becomes: a red carrying its red section (target, contract, symbol, repro line), or, for an
advisory of a subject that is not strict, a pass with a record that the terminal, ``summary.json`` and the report
show in their own colour with the same repro line."""

from __future__ import annotations

import pytest

from harness.formats.environment import repro_environment
from harness.formats.red_section import TITLE as SECTION_TITLE
from harness.formats.red_section import RedSection, repro_line
from harness.plugin import session_state
from harness.plugin.failure import one_line, whole_message
from harness.plugin.families import family_of_case
from harness.plugin.records import append_record


def repro_command(config: pytest.Config, nodeid: str) -> str:
    """The shell line that re-runs one case on this target with this subject, from this matrix file (a candidate's
    matrix is generated, so its path is part of the command)."""
    environment = repro_environment(
        session_state.subject_ref_of(config).spec, session_state.configured_matrix(config).path
    )
    return repro_line(session_state.configured_target(config).session, nodeid, environment)


def judge(item: pytest.Item, report: pytest.TestReport) -> None:
    """Annotate a failed ``report`` of ``item`` with its red section, or turn an advisory into its record."""
    marker = item.get_closest_marker("contract")
    owner = family_of_case(report.nodeid)
    contract = marker.args[0] if marker else (owner.name if owner else item.module.__name__.rsplit(".", 1)[-1])
    symbol = marker.kwargs.get("symbol", "-") if marker else (owner.symbol if owner else "-")
    repro = repro_command(item.config, report.nodeid)
    if report.when == "call" and recorded_as_advisory(item):
        _record_advisory(item.config, contract, report, repro)
        return
    section = RedSection(session_state.configured_target(item.config).session, contract, symbol, repro)
    report.longrepr.addsection(SECTION_TITLE, section.text())


def recorded_as_advisory(item: pytest.Item) -> bool:
    """Whether a failure of ``item`` becomes an advisory's record rather than a red: an advisory of a subject that is
    not strict, or a forecast."""
    advisory = item.get_closest_marker("advisory")
    forecast = advisory is not None and advisory.kwargs.get("forecast", False)
    return advisory is not None and (forecast or not session_state.strict(item.config))


def _record_advisory(config: pytest.Config, family_name: str, report: pytest.TestReport, repro: str) -> None:
    """Turn an advisory's failure into a pass with a record: its first line of message, the whole message where it
    says more (a report folds it), and the repro line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash else str(report.longrepr)
    report.outcome = "passed"
    report.longrepr = None
    entry = {"family": family_name, "case": report.nodeid, "text": one_line(message), "repro": repro}
    detail = whole_message(message)
    if detail:
        entry["detail"] = detail
    append_record(session_state.report_dir_of(config), "advisories", entry)
