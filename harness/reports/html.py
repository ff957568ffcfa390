"""The compatibility report as one HTML page: ``reports/compatibility.html``, self-contained (inline CSS, no scripts,
no network), with every failure the Markdown comment may have had to leave out."""

from __future__ import annotations

import html
from collections.abc import Iterable

from harness.reports.results import INSTALLED, KINDS, WORDS, Cell, Failure, ResultGrid, Row, TargetRun, headline

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
td.none { color: #8c959f; }
.legend span { display: inline-block; padding: 0 8px; margin-right: 6px; border: 1px solid #d0d7de; }
.failure { border-left: 4px solid #cf222e; padding: 2px 14px; margin: 18px 0; }
.failure:target { background: #fff8c5; }
.failure h3 { font-size: 15px; margin: 8px 0; }
.facts { color: #57606a; }
pre { background: #f6f8fa; padding: 8px 10px; white-space: pre-wrap; word-break: break-word; }
"""


def _html_cell(cell: Cell) -> str:
    if not cell.results:
        return '<td class="none">—</td>'
    parts = []
    for status, count in cell.parts:
        text = f"{count} {WORDS[status]}"
        if status == "failed":
            text = f'<a href="#{cell.failures[0].anchor}">{text}</a>'
        parts.append(text)
    return f'<td class="{cell.status}">{" · ".join(parts)}</td>'


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


def render_html(grid: ResultGrid) -> str:
    """The report as one HTML page: the same grid with coloured cells, anchors to every failure, inline CSS."""
    head = "".join(
        f'<th scope="col">{html.escape(run.session)}<span class="pins">'
        + "<br>".join(f"{name} {html.escape(run.installed(name))}" for name in INSTALLED)
        + "</span></th>"
        for run in grid.targets
    )
    body = "\n".join(_html_row(row, grid.targets) for row in grid.rows)
    legend = (
        '<p class="legend">'
        '<span style="background:#d2f4dc">passed</span><span style="background:#ffd7d5">failed or errored</span>'
        '<span style="background:#fff0b3">expected failure (xfail)</span>'
        '<span style="background:#eceff1">skipped</span><span>— not run</span></p>'
    )
    notes = [f"<li>{html.escape(run.session)}: {html.escape(note)}</li>" for run in grid.targets for note in run.notes]
    failures = [_html_failure(failure) for failure in grid.failures]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Megatron compatibility</title><style>{_CSS}</style></head><body>",
            "<h1>Megatron compatibility</h1>",
            f"<p>{html.escape(headline(grid))}</p>",
            legend,
            f'<table class="matrix"><thead><tr><th scope="col">contract / case</th>{head}</tr></thead>',
            f"<tbody>\n{body}\n</tbody></table>",
            *(["<h2>Notes</h2>", "<ul>", *notes, "</ul>"] if notes else []),
            *(["<h2>Failures</h2>", *failures] if failures else []),
            "</body></html>",
            "",
        ]
    )
