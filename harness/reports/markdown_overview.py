"""The top of the Markdown report: with several subjects the comparison, then the findings, then one summary table
per subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded into ``<details>`` by
:mod:`harness.reports.markdown`, so a PR comment opens on these."""

from __future__ import annotations

import html

from harness.formats.markdown import code_span, table_row
from harness.reports.comparison import KINDS, Entry, Pair
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
    listed = [f"{code_span(name)} ({size(nbytes)} in one buffer)" for name, nbytes in row.unbounded.items()]
    return "<br>".join(listed) or "none"


def _verdict(row: TargetFindings) -> str:
    return row.verdict if row.verdict in NOT_KNOWN else f"**{row.verdict}**"


def _merged(cells: list[list[tuple[str, str]]]) -> list[str]:
    """Each target's cell: its text once where its subjects read alike, else one ``subject: text`` line each."""
    return ["<br>".join(f"{html.escape(who)}: {text}" if who else text for who, text in cell) for cell in cells]


def findings_markdown(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised; findings
    of other shapes and blockers listed once each below it, with where they were found."""
    if table is None:
        return []
    rows = [[NEEDED, *_merged(table.cells(_verdict))]]
    for what in table.measurements:
        cells = table.cells(lambda row, w=what: peak_text(row.peak(w)) if row.peak(w) else "—")
        rows.append([html.escape(what), *_merged(cells)])
    rows.append([UNBOUNDED, *_merged(table.cells(_unbounded))])
    if any(row.not_exercised for row in table.targets):
        idle = table.cells(lambda row: ", ".join(code_span(name) for name in row.not_exercised) or "—")
        rows.append([IDLE, *_merged(idle)])
    head = [HEAD, *(target for target, _ in table.columns)]
    other = [f"- {where}: {text}" for where, text in grouped(table.other, table.subjects_on)]
    lines = ["### Findings: is the patch still needed, and enough?", "", *_table(head, rows)]
    return ["\n".join([*lines, *(["", *other] if other else [])])]


def _entry(entry: Entry) -> str:
    case = f"[{code_span(entry.case)}](#{entry.anchor})" if entry.anchor else code_span(entry.case)
    return f"  - {KINDS[entry.kind]} {case}: {code_span(entry.repro)}"


def comparison_markdown(pairs: list[Pair]) -> list[str]:
    """The comparison (nothing for a report of one subject): per target, each subject against the baseline, what it
    fixes, what is new and what both have, each with its repro line, and both advisory counts."""
    if not pairs:
        return []
    lines = [f"### Comparison: each subject against {code_span(pairs[0].baseline)}", ""]
    for pair in pairs:
        head = f"- **{pair.target}** · {code_span(pair.other)}"
        if pair.missing:
            lines.append(f"{head}: not compared, {' and '.join(map(code_span, pair.missing))} did not run there")
            continue
        counts = f"{len(pair.fixed)} fixed, {len(pair.new)} new, {len(pair.shared)} shared"
        before, after = pair.advisories
        lines.append(f"{head}: {'no change' if pair.same else counts}; advisories {before} → {after}")
        for title, found in (("fixed", pair.fixed), ("new", pair.new), ("shared", pair.shared)):
            lines += [f"  - **{title}**", *(f"  {_entry(entry)}" for entry in found)] if found else []
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
