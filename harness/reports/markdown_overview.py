"""The top of the Markdown report: with several subjects the comparison, then the findings, then one summary table
per subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded into ``<details>`` by
:mod:`harness.reports.markdown`, so a PR comment opens on these."""

from __future__ import annotations

import html

from harness.formats.byte_sizes import size
from harness.formats.markdown import breakable_code, code_span, table_row
from harness.reports.comparison import KINDS, Entry, Pair, by_subject, change_folds
from harness.reports.findings import (
    HEAD,
    IDLE,
    NEEDED,
    NOT_KNOWN,
    UNBOUNDED,
    FindingsTable,
    TargetFindings,
    peak_cell,
)
from harness.reports.grouping import grouped
from harness.reports.overview import Verdict, header_version, summary_rows, verdict
from harness.reports.results import NO_SUBJECT, SubjectMatrix, TargetRun

MARKS = {"failed": "❌", "xfailed": "🟡", "passed": "✅", "undeclared": "⚪", "skipped": "⏭️"}
"""The mark of each cell status; a cell where nothing ran has none."""
ADVISORY = "🟠"
"""The advisory marker: neither the red nor the green, beside whatever colour the cell has."""


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [table_row(head), "|---" * len(head) + "|", *(table_row(row) for row in rows)]


def _unbounded(row: TargetFindings) -> str:
    if not row.ran or not row.steps:
        return "—"
    listed = [f"{breakable_code(name)} ({size(nbytes)} in one buffer)" for name, nbytes in row.unbounded.items()]
    return "<br>".join(listed) or "none"


def _verdict(row: TargetFindings) -> str:
    return row.verdict if row.verdict in NOT_KNOWN else f"**{row.verdict}**"


def _names(names: list[str]) -> str:
    return ", ".join(breakable_code(name) for name in names) or "—"


def _rows(label: str, rows: list[tuple[str, list[str]]]) -> list[list[str]]:
    """A finding's rows: one, or one per subject where the subjects differ (the subject after the finding's name)."""
    return [[f"{label} · {breakable_code(subject)}" if subject else label, *cells] for subject, cells in rows]


def findings_markdown(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised (each one
    row per subject where subjects differ); findings of other shapes and blockers listed once each below it, with
    where they were found."""
    if table is None:
        return []
    rows = _rows(NEEDED, table.rows(_verdict))
    for what in table.measurements:
        rows += _rows(html.escape(what), table.rows(peak_cell(what)))
    for label in table.scale_rows:
        rows += _rows(html.escape(label), table.rows(lambda row, at=label: row.scale.get(at, "—")))
    rows += _rows(UNBOUNDED, table.rows(_unbounded))
    if any(row.not_exercised for row in table.targets):
        rows += _rows(IDLE, table.rows(lambda row: _names(row.not_exercised)))
    head = [HEAD, *(target for target, _ in table.columns)]
    other = [f"- {where}: {text}" for where, text in grouped(table.other, table.subjects_on)]
    lines = ["### Findings: is the patch still needed, and enough?", "", *_table(head, rows)]
    return ["\n".join([*lines, *(["", *other] if other else [])])]


def _comparison_cell(pair: Pair) -> str:
    marks = {**MARKS, "advisory": ADVISORY}
    return " · ".join(f"{marks[status]} {text}" if status in marks else text for status, text in pair.summary())


def _change(pair: Pair, what: str, entry: Entry) -> str:
    case = f"[{breakable_code(entry.case)}](#{entry.anchor})" if entry.anchor else breakable_code(entry.case)
    where = f"{pair.target} · {breakable_code(pair.other)}"
    return f"- {where} · **{what}** {KINDS[entry.kind]} {case}: {code_span(entry.repro)}"


def comparison_markdown(pairs: list[Pair]) -> list[str]:
    """The comparison (nothing for a report of one subject): a row per subject, a column per target, what it fixes
    and breaks against the baseline; then every new red with its repro line (open), and what is fixed or shared
    (folded)."""
    if not pairs:
        return []
    targets = list(dict.fromkeys(pair.target for pair in pairs))
    rows = [[breakable_code(other), *map(_comparison_cell, found)] for other, found in by_subject(pairs).items()]
    lines = [f"### Comparison: each subject against {breakable_code(pairs[0].baseline)}", ""]
    lines += _table(["subject", *targets], rows)
    for title, opened, changes in change_folds(pairs):
        summary = f"<b>{title}</b>, each with its repro line ({len(changes)})"
        lines += ["", f"<details{' open' if opened else ''}><summary>{summary}</summary>", ""]
        lines += [*(_change(*change) for change in changes), "", "</details>"]
    return ["\n".join(lines)]


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
    return f"{run.target_session}<br><sub>{version}</sub>"


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
