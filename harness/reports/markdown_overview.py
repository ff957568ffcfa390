"""The top of the Markdown report: the findings, then one summary table per subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded into ``<details>`` by
:mod:`harness.reports.markdown`, so a PR comment opens on these."""

from __future__ import annotations

import html

from harness.formats.markdown import code_span, table_row
from harness.reports.findings import (
    HEAD,
    IDLE,
    NEEDED,
    NOT_KNOWN,
    UNBOUNDED,
    FindingsTable,
    TargetFindings,
    peak_text,
    size,
)
from harness.reports.overview import NO_SUBJECT, Verdict, header_version, summary_rows, verdict
from harness.reports.results import SubjectMatrix, TargetRun

MARKS = {"failed": "❌", "xfailed": "🟡", "passed": "✅", "undeclared": "⚪", "skipped": "⏭️"}
"""The mark of each cell status; a cell where nothing ran has none."""
ADVISORY = "🟠"
"""The advisory marker: neither the red nor the green, beside whatever colour the cell has."""


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [table_row(head), "|---" * len(head) + "|", *(table_row(row) for row in rows)]


def _unbounded(row: TargetFindings) -> str:
    if not row.ran or not row.steps:
        return "—"
    listed = [f"{code_span(name)} ({size(nbytes)} in one buffer)" for name, nbytes in row.unbounded.items()]
    return "<br>".join(listed) or "none"


def findings_markdown(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised; findings
    of other shapes and blockers listed whole below it."""
    if table is None:
        return []
    targets = table.targets
    rows = [[NEEDED, *(r.verdict if r.verdict in NOT_KNOWN else f"**{r.verdict}**" for r in targets)]]
    for what in table.measurements:
        peaks = [row.peak(what) for row in targets]
        rows.append([html.escape(what), *(peak_text(peak) if peak else "—" for peak in peaks)])
    rows.append([UNBOUNDED, *(_unbounded(row) for row in targets)])
    if any(row.not_exercised for row in targets):
        idle = [", ".join(code_span(name) for name in row.not_exercised) or "—" for row in targets]
        rows.append([IDLE, *idle])
    head = [HEAD, *(row.session for row in targets)]
    other = [f"- {session}: {text}" for session, text in table.other]
    lines = ["### Findings: is the patch still needed, and enough?", "", *_table(head, rows)]
    return ["\n".join([*lines, *(["", *other] if other else [])])]


def _summary_cell(found: Verdict) -> str:
    mark = MARKS.get(found.status)
    text = f"{mark} {found.text}" if mark else found.text
    if found.link:
        text = f"[{text}](#{found.link})"
    if found.advisory_link:
        text += f" · [{ADVISORY} {found.advisories}](#{found.advisory_link})"
    return text


def _summary_header(run: TargetRun) -> str:
    version = html.escape(header_version(run))
    return f"{run.session}<br><sub>{version}</sub>"


def summary_heading(matrix: SubjectMatrix) -> str:
    """What a summary table is headed by: the subject's full spec."""
    if matrix.subject is None:
        return NO_SUBJECT
    return f"subject {code_span(matrix.subject.spec)} ({matrix.subject.kind})"


def summary_markdown(matrix: SubjectMatrix) -> str:
    """One subject's summary: a row per family (and the total), a column per target, one verdict per cell."""
    rows = [
        [f"**{row.label}**", *(_summary_cell(verdict(row, run)) for run in matrix.targets)]
        for row in summary_rows(matrix)
    ]
    head = ["contract", *(_summary_header(run) for run in matrix.targets)]
    return "\n".join([f"### Summary: {summary_heading(matrix)}", "", *_table(head, rows)])
