"""The top of the HTML page: the findings, then one summary table per subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded away by :mod:`harness.reports.html`, so
these are what fits the first screen."""

from __future__ import annotations

import html

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
from harness.reports.results import SubjectMatrix, TargetRun, advisory_text


def breakable(text: str) -> str:
    """``text`` escaped, with a break opportunity after each ``_``, ``.`` and ``/``: a case or function name, a
    dotted package or a path then wraps inside its column instead of widening the page."""
    escaped = html.escape(text)
    for mark in "_./":
        escaped = escaped.replace(mark, f"{mark}<wbr>")
    return escaped


def _unbounded(row: TargetFindings) -> str:
    if not row.ran or not row.steps:
        return '<td class="none">—</td>'
    if not row.unbounded:
        return "<td>none</td>"
    listed = "<br>".join(
        f"<code>{breakable(name)}</code> ({size(nbytes)} in one buffer)" for name, nbytes in row.unbounded.items()
    )
    return f'<td class="unbounded">{listed}</td>'


def _names(names: list[str]) -> str:
    return ", ".join(f"<code>{breakable(name)}</code>" for name in names) or "—"


def _findings_row(label: str, cells: list[str]) -> str:
    return f'<tr><th scope="row">{label}</th>{"".join(cells)}</tr>'


def findings_html(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised; findings
    of other shapes and blockers listed whole below it."""
    if table is None:
        return []
    rows = table.targets
    verdicts = [
        f'<td class="none">{row.verdict}</td>'
        if row.verdict in NOT_KNOWN
        else f"<td><strong>{row.verdict}</strong></td>"
        for row in rows
    ]
    lines = [_findings_row(NEEDED, verdicts)]
    for what in table.measurements:
        peaks = [row.peak(what) for row in rows]
        cells = [f"<td>{peak_text(peak)}</td>" if peak else '<td class="none">—</td>' for peak in peaks]
        lines.append(_findings_row(html.escape(what), cells))
    lines.append(_findings_row(UNBOUNDED, [_unbounded(row) for row in rows]))
    if any(row.not_exercised for row in rows):
        idle = [f'<td class="quiet">{_names(row.not_exercised)}</td>' for row in rows]
        lines.append(_findings_row(IDLE, idle))
    head = "".join(f'<th scope="col">{html.escape(row.session)}</th>' for row in rows)
    other = [f"<li>{html.escape(session)}: {html.escape(text)}</li>" for session, text in table.other]
    return [
        "<h2>Findings: is the patch still needed, and enough?</h2>",
        f'<table class="findings"><thead><tr><th scope="col">{HEAD}</th>{head}</tr></thead><tbody>',
        *lines,
        "</tbody></table>",
        *(['<ul class="other">', *other, "</ul>"] if other else []),
    ]


def _summary_cell(found: Verdict) -> str:
    text = html.escape(found.text)
    if found.link:
        text = f'<a href="#{found.link}">{text}</a>'
    if found.advisory_link:
        title = advisory_text(found.advisories)
        text += f' <a class="advisory" href="#{found.advisory_link}" title="{title}">{found.advisories}</a>'
    title = f' title="{html.escape(found.why)}"' if found.why else ""
    return f'<td class="{found.status}"{title}>{text}</td>'


def _summary_header(run: TargetRun) -> str:
    version = html.escape(header_version(run))
    return f'<th scope="col">{html.escape(run.session)}<span class="pins">{version}</span></th>'


def summary_heading(matrix: SubjectMatrix) -> str:
    """What a summary table and its folded matrix are headed by: the subject's full spec."""
    if matrix.subject is None:
        return NO_SUBJECT
    return f"subject <code>{breakable(matrix.subject.spec)}</code> ({html.escape(matrix.subject.kind)})"


def summary_html(matrix: SubjectMatrix) -> list[str]:
    """One subject's summary: a row per family (and the total), a column per target, one verdict per cell."""
    rows = []
    for row in summary_rows(matrix):
        label = html.escape(row.label)
        cells = "".join(_summary_cell(verdict(row, run)) for run in matrix.targets)
        rows.append(f'<tr class="{"family" if row.module else "total"}"><th scope="row">{label}</th>{cells}</tr>')
    return [
        f"<h2>Summary: {summary_heading(matrix)}</h2>",
        '<table class="summary"><thead><tr><th scope="col">contract</th>',
        *(_summary_header(run) for run in matrix.targets),
        "</tr></thead><tbody>",
        *rows,
        "</tbody></table>",
    ]
