"""The top of the HTML page: with several subjects the comparison, then the findings, then one summary table per
subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded away by :mod:`harness.reports.html`, so
these are what fits the first screen."""

from __future__ import annotations

import html

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
from harness.reports.results import NO_SUBJECT, SubjectMatrix, TargetRun, advisory_text


def breakable(text: str) -> str:
    """``text`` escaped, with a break opportunity after each ``_``, ``.`` and ``/``: a case or function name, a
    dotted package or a path then wraps inside its column instead of widening the page."""
    escaped = html.escape(text)
    for mark in "_./":
        escaped = escaped.replace(mark, f"{mark}<wbr>")
    return escaped


def _unbounded(row: TargetFindings) -> str:
    if not row.ran or not row.steps:
        return "—"
    return (
        "<br>".join(
            f"<code>{breakable(name)}</code> ({size(nbytes)} in one buffer)" for name, nbytes in row.unbounded.items()
        )
        or "none"
    )


def _verdict(row: TargetFindings) -> str:
    return row.verdict if row.verdict in NOT_KNOWN else f"<strong>{row.verdict}</strong>"


def _names(names: list[str]) -> str:
    return ", ".join(f"<code>{breakable(name)}</code>" for name in names) or "—"


def _merged(cells: list[list[tuple[str, str]]], kind: str = "") -> str:
    """Each target's cell: its text once where its subjects read alike, else one line per subject (its label in
    grey). ``—`` and the verdicts that say nothing is known are quiet; ``kind`` is the class of a cell that says
    something."""
    out = []
    for cell in cells:
        lines = [f'<span class="quiet">{html.escape(who)}:</span> {text}' if who else text for who, text in cell]
        quiet = all(text in ("—", *NOT_KNOWN) for _, text in cell)
        says = any(text not in ("—", "none") for _, text in cell)
        css = "none" if quiet else kind if says else ""
        out.append(f"<td{f' class={chr(34)}{css}{chr(34)}' if css else ''}>{'<br>'.join(lines)}</td>")
    return "".join(out)


def _findings_row(label: str, cells: str) -> str:
    return f'<tr><th scope="row">{label}</th>{cells}</tr>'


def findings_html(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised; findings
    of other shapes and blockers listed once each below it, with where they were found."""
    if table is None:
        return []
    lines = [_findings_row(NEEDED, _merged(table.cells(_verdict)))]
    for what in table.measurements:
        cells = table.cells(lambda row, w=what: peak_text(row.peak(w)) if row.peak(w) else "—")
        lines.append(_findings_row(html.escape(what), _merged(cells)))
    lines.append(_findings_row(UNBOUNDED, _merged(table.cells(_unbounded), "unbounded")))
    if any(row.not_exercised for row in table.targets):
        lines.append(_findings_row(IDLE, _merged(table.cells(lambda row: _names(row.not_exercised)), "quiet")))
    head = "".join(f'<th scope="col">{html.escape(target)}</th>' for target, _ in table.columns)
    other = [
        f"<li>{html.escape(where)}: {html.escape(text)}</li>" for where, text in grouped(table.other, table.subjects_on)
    ]
    return [
        "<h2>Findings: is the patch still needed, and enough?</h2>",
        f'<table class="findings"><thead><tr><th scope="col">{HEAD}</th>{head}</tr></thead><tbody>',
        *lines,
        "</tbody></table>",
        *(['<ul class="other">', *other, "</ul>"] if other else []),
    ]


def _entry(entry: Entry) -> str:
    case = f"<code>{breakable(entry.case)}</code>"
    if entry.anchor:
        case = f'<a href="#{entry.anchor}">{case}</a>'
    return f'<li>{KINDS[entry.kind]} {case}<br><code class="repro">{html.escape(entry.repro)}</code></li>'


def comparison_html(pairs: list[Pair]) -> list[str]:
    """The comparison (nothing for a report of one subject): per target, each subject against the baseline, what it
    fixes, what is new and what both have, each with its repro line, and both advisory counts."""
    if not pairs:
        return []
    lines = [
        f"<h2>Comparison: each subject against <code>{breakable(pairs[0].baseline)}</code></h2>",
        '<ul class="comparison">',
    ]
    for pair in pairs:
        head = f"<strong>{html.escape(pair.target)}</strong> · <code>{breakable(pair.other)}</code>"
        if pair.missing:
            missing = " and ".join(f"<code>{breakable(label)}</code>" for label in pair.missing)
            lines.append(f'<li class="quiet">{head}: not compared, {missing} did not run there</li>')
            continue
        before, after = pair.advisories
        counts = f"{len(pair.fixed)} fixed, {len(pair.new)} new, {len(pair.shared)} shared"
        lines.append(f"<li>{head}: {'no change' if pair.same else counts}; advisories {before} → {after}")
        for title, found in (("fixed", pair.fixed), ("new", pair.new), ("shared", pair.shared)):
            if found:
                lines += [
                    f'<ul class="{title}"><li><strong>{title}</strong><ul>',
                    *map(_entry, found),
                    "</ul></li></ul>",
                ]
        lines.append("</li>")
    return [*lines, "</ul>"]


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
    return f'<th scope="col">{html.escape(run.target_session)}<span class="pins">{version}</span></th>'


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
