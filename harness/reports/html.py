"""The compatibility report as one HTML page: ``reports/compatibility.html``, self-contained (inline CSS, no scripts,
no network), with every failure the Markdown comment may have had to leave out.

The first screen is :mod:`harness.reports.html_overview` (findings, then a summary per subject); every case, the
notes, failures and advisories follow in ``<details>`` blocks, folded unless they hold a red. The page must not be
wider than the window at 1400 px with seven targets: tables take the page's width and names wrap where they break
(``<wbr>`` after ``_``, ``.`` and ``/``)."""

from __future__ import annotations

import html
from collections.abc import Iterable

from harness.formats.markdown import breakable
from harness.reports.comparison import compare
from harness.reports.failures import KINDS, Failure
from harness.reports.findings import findings_table
from harness.reports.grouping import grouped
from harness.reports.html_overview import comparison_html, findings_html, summary_heading, summary_html
from harness.reports.results import (
    INSTALLED,
    Advisory,
    Cell,
    ResultGrid,
    Row,
    SubjectMatrix,
    TargetRun,
    Undeclared,
    advisory_text,
    headline,
    part_text,
)

CSS = """
body { font: 14px/1.45 "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 18px 0 6px; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
table { border-collapse: collapse; margin: 8px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; }
thead th .pins { display: block; font-weight: normal; font-size: 12px; color: #57606a; }
tbody th { font-weight: normal; }
table.findings, table.summary, table.matrix, table.comparison { table-layout: fixed; width: 100%; }
table.findings th, table.findings td, table.summary th, table.summary td, table.matrix th, table.matrix td,
table.comparison th, table.comparison td {
  overflow-wrap: anywhere;
}
thead th:first-child { width: 18%; }
table.findings tbody th { color: #57606a; }
tr.total th, tr.total td { font-weight: bold; border-bottom: 2px solid #8c959f; }
tr.family th { font-weight: bold; background: #eef1f4; }
tr.case th { padding-left: 28px; }
td.failed { background: #ffd7d5; }
td.failed a { color: #a40e26; font-weight: bold; }
td.passed { background: #d2f4dc; }
td.xfailed { background: #fff0b3; }
td.skipped { background: #eceff1; color: #57606a; }
td.undeclared { background: #e1e4e8; color: #57606a; font-style: italic; }
td.none, .quiet { color: #8c959f; }
td.unbounded { background: #fff1e0; }
.quiet { font-size: 12px; }
.advisory { background: #ffb547; color: #4d2d00; padding: 0 6px; border-radius: 3px; font-weight: bold; }
a.advisory { text-decoration: none; }
.legend { font-size: 12px; }
.legend span { display: inline-block; padding: 0 6px; margin: 0 4px 4px 0; border: 1px solid #d0d7de; }
details.section { margin: 10px 0; border-top: 1px solid #d0d7de; padding-top: 6px; }
details.section > summary { font-size: 17px; font-weight: bold; cursor: pointer; }
.failure, .advisory-entry { padding: 2px 14px; margin: 18px 0; }
.failure { border-left: 4px solid #cf222e; }
.advisory-entry { border-left: 4px solid #e8890c; }
.failure:target, .advisory-entry:target { background: #fff8c5; }
.failure h3, .advisory-entry h3 { font-size: 15px; margin: 8px 0; }
.facts { color: #57606a; }
ul.comparison code.repro { font-size: 12px; color: #57606a; overflow-wrap: anywhere; }
pre { background: #f6f8fa; padding: 8px 10px; white-space: pre-wrap; word-break: break-word; }
"""


def _html_cell(cell: Cell) -> str:
    """A cell coloured by its worst verdict; advisories add an amber mark of their own and never change that colour."""
    parts = []
    for status, count in cell.parts:
        text = part_text(status, count)
        if status == "failed":
            text = f'<a href="#{cell.failures[0].anchor}">{text}</a>'
        parts.append(text)
    if cell.advisories:
        count = advisory_text(len(cell.advisories))
        parts.append(f'<a class="advisory" href="#{cell.advisories[0].anchor}">{count}</a>')
    if not parts:
        return '<td class="none">—</td>'
    return f'<td class="{cell.status}">{" · ".join(parts)}</td>'


def _html_header(run: TargetRun) -> str:
    """The session, then its subject (a declaration's framework package and file below its source root, else the
    file or module name; the full spec as its title), the selection that narrowed it, and its versions (the matrix's
    pins when it recorded none)."""
    lines = [] if run.ran else ["not run"]
    if run.subject:
        title = html.escape(f"{run.subject.spec} ({run.subject.kind})")
        lines.append(f'subject <code title="{title}">{breakable(run.subject.short)}</code>')
    if run.selection:
        lines.append(f"selection <code>{breakable(' '.join(run.selection))}</code>")
    if run.pinned:
        lines.append("pins from matrix.yaml")
    lines += [f"{name} {html.escape(run.version(name))}" for name in INSTALLED]
    return f'<th scope="col">{html.escape(run.target_session)}<span class="pins">{"<br>".join(lines)}</span></th>'


def _html_row(row: Row, targets: Iterable[TargetRun]) -> str:
    if not row.module:
        kind, label = "total", html.escape(row.label)
    elif row.function is None:
        kind = "family"
        label = html.escape(row.label)
        if row.label != row.module:
            label += f" <code>{breakable(row.module)}</code>"
    else:
        kind, label = "case", f"<code>{breakable(row.label)}</code>"
    cells = "".join(_html_cell(row.cells[run.session]) for run in targets)
    return f'<tr class="{kind}"><th scope="row">{label}</th>{cells}</tr>'


def _html_failure(failure: Failure) -> str:
    facts = [KINDS[failure.kind]]
    if failure.contract:
        facts.append(f"contract <code>{html.escape(failure.contract)}</code>")
    if failure.symbol:
        facts.append(f"symbol <code>{html.escape(failure.symbol)}</code>")
    parts = [
        f'<section class="failure" id="{failure.anchor}">',
        f"<h3>{html.escape(failure.target)} · <code>{html.escape(failure.nodeid)}</code></h3>",
        f'<p class="facts">{" · ".join(facts)}</p>',
        f"<pre>{html.escape(chr(10).join(failure.message) or '(no message)')}</pre>",
        f'<p>Repro:</p><pre class="repro"><code>{html.escape(failure.repro)}</code></pre>',
    ]
    if failure.blob:
        parts.append(
            f"<p>Hypothesis replays this example with <code>{html.escape(failure.blob)}</code> "
            "as a decorator on the test.</p>"
        )
    if failure.example:
        example = html.escape("\n".join(failure.example))
        parts.append(f"<details><summary>Falsifying example</summary><pre>{example}</pre></details>")
    return "\n".join([*parts, "</section>"])


def _html_advisory(advisory: Advisory) -> str:
    """An advisory entry, laid out as a failure's: where, what property and what happened, the line that replays it."""
    return "\n".join(
        [
            f'<section class="advisory-entry" id="{advisory.anchor}">',
            f"<h3>{html.escape(advisory.target)} · <code>{html.escape(advisory.nodeid)}</code></h3>",
            f'<p class="facts">advisory · contract <code>{html.escape(advisory.family)}</code></p>',
            f"<pre>{html.escape(advisory.text)}</pre>",
            f'<p>Repro:</p><pre class="repro"><code>{html.escape(advisory.repro)}</code></pre>',
            *(
                [f"<details><summary>Whole message</summary><pre>{html.escape(advisory.detail)}</pre></details>"]
                if advisory.detail
                else []
            ),
            "</section>",
        ]
    )


def _html_undeclared(undeclared: Undeclared) -> str:
    where = html.escape(f"{undeclared.family} on {', '.join(undeclared.sessions)}")
    return f"<li>{where}: <code>{html.escape(undeclared.message)}</code></li>"


def _html_matrix(matrix: SubjectMatrix) -> list[str]:
    """One subject's table of every case, then the messages of the families its declaration leaves out: folded, and
    open when it holds a red."""
    head = "".join(_html_header(run) for run in matrix.targets)
    body = "\n".join(_html_row(row, matrix.targets) for row in matrix.rows)
    lines = [
        _fold(f"Every case: {summary_heading(matrix)}", matrix.red),
        f'<table class="matrix"><thead><tr><th scope="col">contract / case</th>{head}</tr></thead>',
        f"<tbody>\n{body}\n</tbody></table>",
    ]
    undeclared = [_html_undeclared(u) for u in matrix.not_declared]
    if undeclared:
        intro = "<p>Not declared: the subject's declaration leaves these roles out, so their cases ran nothing.</p>"
        lines += [intro, '<ul class="undeclared">', *undeclared, "</ul>"]
    return [*lines, "</details>"]


def _fold(summary: str, open_: bool) -> str:
    """The opening of a folded block; one that holds a red is open, so that no red is hidden behind a click."""
    return f'<details class="section"{" open" if open_ else ""}><summary>{summary}</summary>'


def _section(title: str, entries: list[str], open_: bool = False, before: str = "", after: str = "") -> list[str]:
    """A folded block of the page's lower part, its count in its summary line; nothing when it has no entries."""
    if not entries:
        return []
    head = _fold(f"{title} ({len(entries)})", open_)
    return [head, *([before] if before else []), *entries, *([after] if after else []), "</details>"]


_LEGEND = (
    '<p class="legend">'
    '<span style="background:#d2f4dc">passed</span><span style="background:#ffd7d5">failed, errored or blocked</span>'
    '<span style="background:#fff0b3">expected failure (xfail)</span>'
    '<span style="background:#eceff1">skipped</span>'
    '<span style="background:#e1e4e8">not declared (nothing ran)</span>'
    '<span class="advisory">advisories (need not be met; never a red)</span>'
    "<span>—, did not run, not run: nothing checked</span></p>"
)

_FAILURES = "<p>A red cell links to its first failure; the others of that cell follow it.</p>"
_ADVISORIES = (
    "<p>Properties a correct adapter need not meet, so none of them turns a cell red; an advisory mark links to its "
    "cell's first advisory, the others of that cell follow it.</p>"
)


def render_html(grid: ResultGrid, baseline: str | None = None) -> str:
    """The report as one HTML page: headline, the comparison of several subjects (each against ``baseline``, else
    the first), findings and a summary per subject first, then every case, the notes (each once), the failures
    (open) and the advisories, folded; anchors to every failure and advisory, inline CSS."""
    said = [(run.target_session, run.subject_name, note) for run in grid.targets for note in run.notes]
    notes = [f"<li>{html.escape(where)}: {html.escape(note)}</li>" for where, note in grouped(said, grid.subjects_on)]
    failures = [_html_failure(failure) for failure in grid.failures]
    advisories = [_html_advisory(advisory) for advisory in grid.advisories]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Megatron compatibility</title><style>{CSS}</style></head><body>",
            "<h1>Megatron compatibility</h1>",
            f'<p class="headline">{html.escape(headline(grid))}</p>',
            *comparison_html(compare(grid, baseline)),
            *findings_html(findings_table(grid.targets)),
            *(line for matrix in grid.matrices for line in summary_html(matrix)),
            _LEGEND,
            *(line for matrix in grid.matrices for line in _html_matrix(matrix)),
            *_section("Notes", notes, before="<ul>", after="</ul>"),
            *_section("Failures", failures, open_=True, before=_FAILURES),
            *_section("Advisories", advisories, before=_ADVISORIES),
            "</body></html>",
            "",
        ]
    )
