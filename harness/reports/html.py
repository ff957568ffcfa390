"""The compatibility report as one HTML page: ``reports/compatibility.html``, self-contained (inline CSS, no scripts,
no network), with every failure the Markdown comment may have had to leave out."""

from __future__ import annotations

import html
from collections.abc import Iterable

from harness.reports.results import (
    INSTALLED,
    KINDS,
    Advisory,
    Cell,
    Failure,
    ResultGrid,
    Row,
    SubjectMatrix,
    TargetRun,
    Undeclared,
    advisory_text,
    headline,
    part_text,
)

_CSS = """
body { font: 14px/1.45 "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 22px; margin: 0 0 4px; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
table { border-collapse: collapse; margin: 12px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; }
thead th .pins { display: block; font-weight: normal; font-size: 12px; color: #57606a; }
tbody th { font-weight: normal; }
tr.total th, tr.total td { font-weight: bold; border-bottom: 2px solid #8c959f; }
tr.family th { font-weight: bold; background: #eef1f4; }
tr.case th { padding-left: 28px; }
td.failed { background: #ffd7d5; }
td.failed a { color: #a40e26; font-weight: bold; }
td.passed { background: #d2f4dc; }
td.xfailed { background: #fff0b3; }
td.skipped { background: #eceff1; color: #57606a; }
td.undeclared { background: #e1e4e8; color: #57606a; font-style: italic; }
td.none { color: #8c959f; }
.advisory { background: #ffb547; color: #4d2d00; padding: 0 6px; border-radius: 3px; font-weight: bold; }
a.advisory { text-decoration: none; }
.legend span { display: inline-block; padding: 0 8px; margin-right: 6px; border: 1px solid #d0d7de; }
.failure, .advisory-entry { padding: 2px 14px; margin: 18px 0; }
.failure { border-left: 4px solid #cf222e; }
.advisory-entry { border-left: 4px solid #e8890c; }
.failure:target, .advisory-entry:target { background: #fff8c5; }
.failure h3, .advisory-entry h3 { font-size: 15px; margin: 8px 0; }
.facts { color: #57606a; }
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
        lines.append(f'subject <code title="{title}">{html.escape(run.subject.short)}</code>')
    if run.selection:
        lines.append(f"selection <code>{html.escape(' '.join(run.selection))}</code>")
    if run.pinned:
        lines.append("pins from matrix.yaml")
    lines += [f"{name} {html.escape(run.version(name))}" for name in INSTALLED]
    return f'<th scope="col">{html.escape(run.session)}<span class="pins">{"<br>".join(lines)}</span></th>'


def _html_row(row: Row, targets: Iterable[TargetRun]) -> str:
    if not row.module:
        kind, label = "total", html.escape(row.label)
    elif row.function is None:
        kind = "family"
        label = html.escape(row.label)
        if row.label != row.module:
            label += f" <code>{html.escape(row.module)}</code>"
    else:
        kind, label = "case", f"<code>{html.escape(row.label)}</code>"
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
            "</section>",
        ]
    )


def _html_undeclared(undeclared: Undeclared) -> str:
    where = html.escape(f"{undeclared.family} on {', '.join(undeclared.sessions)}")
    return f"<li>{where}: <code>{html.escape(undeclared.message)}</code></li>"


def _html_heading(matrix: SubjectMatrix) -> str:
    if matrix.subject is None:
        return "<h2>Subject not recorded (no readable summary.json)</h2>"
    subject = matrix.subject
    return f"<h2>Subject <code>{html.escape(subject.spec)}</code> ({html.escape(subject.kind)})</h2>"


def _html_matrix(matrix: SubjectMatrix) -> list[str]:
    """One subject's heading and table, then the messages of the families its declaration leaves out."""
    head = "".join(_html_header(run) for run in matrix.targets)
    body = "\n".join(_html_row(row, matrix.targets) for row in matrix.rows)
    lines = [
        _html_heading(matrix),
        f'<table class="matrix"><thead><tr><th scope="col">contract / case</th>{head}</tr></thead>',
        f"<tbody>\n{body}\n</tbody></table>",
    ]
    undeclared = [_html_undeclared(u) for u in matrix.not_declared]
    if undeclared:
        intro = "<p>Not declared: the subject's declaration leaves these roles out, so their cases ran nothing.</p>"
        lines += [intro, '<ul class="undeclared">', *undeclared, "</ul>"]
    return lines


def render_html(grid: ResultGrid) -> str:
    """The report as one HTML page: one grid per subject with coloured cells, anchors to every failure and advisory,
    inline CSS."""
    legend = (
        '<p class="legend">'
        '<span style="background:#d2f4dc">passed</span><span style="background:#ffd7d5">failed or errored</span>'
        '<span style="background:#fff0b3">expected failure (xfail)</span>'
        '<span style="background:#eceff1">skipped</span>'
        '<span style="background:#e1e4e8">not declared (nothing ran)</span>'
        '<span class="advisory">advisory (need not be met; never a red)</span><span>— not run</span></p>'
    )
    notes = [f"<li>{html.escape(run.session)}: {html.escape(note)}</li>" for run in grid.targets for note in run.notes]
    findings = [f"<li>{html.escape(run.session)}: {html.escape(f)}</li>" for run in grid.targets for f in run.findings]
    failures = [_html_failure(failure) for failure in grid.failures]
    advisories = [_html_advisory(advisory) for advisory in grid.advisories]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Megatron compatibility</title><style>{_CSS}</style></head><body>",
            "<h1>Megatron compatibility</h1>",
            f"<p>{html.escape(headline(grid))}</p>",
            *(
                ["<h2>Findings: is the patch still needed, and enough?</h2>", "<ul>", *findings, "</ul>"]
                if findings
                else []
            ),
            legend,
            *(line for matrix in grid.matrices for line in _html_matrix(matrix)),
            *(["<h2>Notes</h2>", "<ul>", *notes, "</ul>"] if notes else []),
            *(["<h2>Failures</h2>", *failures] if failures else []),
            *(["<h2>Advisories</h2>", *advisories] if advisories else []),
            "</body></html>",
            "",
        ]
    )
