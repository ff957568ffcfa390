"""The top of the HTML page: with several subjects the comparison, then the findings, then one summary table per
subject, both a column per target.
Everything below them (every case, notes, failures, advisories) is folded away by :mod:`harness.reports.html`, so
these are what fits the first screen."""

from __future__ import annotations

import html

from harness.formats.byte_sizes import size
from harness.formats.markdown import breakable
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
from harness.reports.results import NO_SUBJECT, SubjectMatrix, TargetRun, advisory_text


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


def _cells(cells: list[str], kind: str = "") -> str:
    """A finding's cells: ``—`` and the verdicts that say nothing is known are quiet; ``kind`` is the class of a cell
    that says something."""
    out = []
    for text in cells:
        css = "none" if text in ("—", *NOT_KNOWN) else kind if text != "none" else ""
        out.append(f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>")
    return "".join(out)


def _rows(label: str, rows: list[tuple[str, list[str]]], kind: str = "") -> list[str]:
    """A finding's rows: one, or one per subject where the subjects differ (the subject after the finding's name)."""
    return [
        f'<tr><th scope="row">{label}{f" · <code>{breakable(subject)}</code>" if subject else ""}</th>'
        f"{_cells(cells, kind)}</tr>"
        for subject, cells in rows
    ]


def findings_html(table: FindingsTable | None) -> list[str]:
    """The findings (nothing when no target recorded one): a column per target, a row for the verdict, one per
    measurement, one for the reductions the subject leaves unbounded and one for those nothing exercised (each one
    row per subject where subjects differ); findings of other shapes and blockers listed once each below it, with
    where they were found."""
    if table is None:
        return []
    lines = _rows(NEEDED, table.rows(_verdict))
    for what in table.measurements:
        lines += _rows(html.escape(what), table.rows(peak_cell(what)))
    for label in table.scale_rows:
        lines += _rows(html.escape(label), table.rows(lambda row, at=label: row.scale.get(at, "—")))
    lines += _rows(UNBOUNDED, table.rows(_unbounded), "unbounded")
    if any(row.not_exercised for row in table.targets):
        lines += _rows(IDLE, table.rows(lambda row: _names(row.not_exercised)), "quiet")
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


def _comparison_cell(pair: Pair) -> str:
    parts = [
        f'<span class="quiet">{text}</span>' if status == "advisory" else html.escape(text)
        for status, text in pair.summary()
    ]
    status = pair.summary()[0][0]
    return f'<td class="{status}">{" · ".join(parts)}</td>' if status else f"<td>{' · '.join(parts)}</td>"


def _change(pair: Pair, what: str, entry: Entry) -> str:
    case = f"<code>{breakable(entry.case)}</code>"
    if entry.anchor:
        case = f'<a href="#{entry.anchor}">{case}</a>'
    where = f"{html.escape(pair.target)} · <code>{breakable(pair.other)}</code>"
    repro = f'<code class="repro">{html.escape(entry.repro)}</code>'
    return f"<li>{where} · <strong>{what}</strong> {KINDS[entry.kind]} {case}<br>{repro}</li>"


def comparison_html(pairs: list[Pair]) -> list[str]:
    """The comparison (nothing for a report of one subject): a row per subject, a column per target, what it fixes
    and breaks against the baseline; then every new red with its repro line (open), and what is fixed or shared
    (folded)."""
    if not pairs:
        return []
    targets = "".join(f'<th scope="col">{html.escape(t)}</th>' for t in dict.fromkeys(p.target for p in pairs))
    rows = [
        f'<tr><th scope="row"><code>{breakable(other)}</code></th>{"".join(map(_comparison_cell, found))}</tr>'
        for other, found in by_subject(pairs).items()
    ]
    folds = []
    for title, opened, changes in change_folds(pairs):
        summary = f"{title}, each with its repro line ({len(changes)})"
        folds += [f'<details class="section"{" open" if opened else ""}><summary>{summary}</summary>']
        folds += ['<ul class="comparison">', *(_change(*change) for change in changes), "</ul></details>"]
    return [
        f"<h2>Comparison: each subject against <code>{breakable(pairs[0].baseline)}</code></h2>",
        f'<table class="comparison"><thead><tr><th scope="col">subject</th>{targets}</tr></thead><tbody>',
        *rows,
        "</tbody></table>",
        *folds,
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
