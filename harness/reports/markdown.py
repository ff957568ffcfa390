"""The compatibility report as Markdown: ``reports/compatibility.md``, posted as a PR comment and the job summary.

Everything quoted is escaped through :mod:`harness.formats.markdown`; failures past GitHub's comment size are left to
the HTML page (:mod:`harness.reports.html`).
"""

from __future__ import annotations

import html

from harness.formats.markdown import code_block, code_span, table_row
from harness.reports.results import INSTALLED, KINDS, WORDS, Cell, Failure, ResultGrid, Row, TargetRun, headline

_MARKS = {"failed": "❌", "xfailed": "🟡", "passed": "✅", "skipped": "⏭️"}
_MARKDOWN_LIMIT = 60_000
"""GitHub refuses comment bodies over 65,536 characters; failures past this budget are left to the HTML page."""


def _md_cell(cell: Cell) -> str:
    if not cell.results:
        return "—"
    parts = []
    for status, count in cell.parts:
        text = f"{_MARKS[status]} {count} {WORDS[status]}"
        if status == "failed":
            text = f"[{text}](#{cell.failures[0].anchor})"
        parts.append(text)
    return " · ".join(parts)


def _md_header(run: TargetRun) -> str:
    pins = "<br>".join(f"{name} {html.escape(run.installed(name))}" for name in INSTALLED)
    return f"{run.session}<br><sub>{pins}</sub>"


def _md_label(row: Row) -> str:
    """The first cell of a row, unescaped (:func:`table_row` escapes its pipes, which GitHub splits cells on even
    inside code)."""
    if not row.module:
        return f"**{row.label}**"
    if row.function is None:
        suffix = f" {code_span(row.module)}" if row.label != row.module else ""
        return f"**{row.label}**{suffix}"
    return "&nbsp;&nbsp;&nbsp;" + code_span(row.label)


def _md_failure(failure: Failure) -> str:
    facts = [KINDS[failure.kind]]
    if failure.contract:
        facts.append(f"contract {code_span(failure.contract)}")
    if failure.symbol:
        facts.append(f"symbol {code_span(failure.symbol)}")
    parts = [
        f'### <a id="{failure.anchor}"></a>{failure.target} · {code_span(failure.nodeid)}',
        " · ".join(facts),
        code_block("\n".join(failure.message) or "(no message)"),
        "Repro:",
        code_block(failure.repro, "sh"),
    ]
    if failure.blob:
        parts.append(f"Hypothesis replays this example with {code_span(failure.blob)} as a decorator on the test.")
    if failure.example:
        parts.append(
            f"<details><summary>Falsifying example</summary>\n\n{code_block(chr(10).join(failure.example))}\n\n"
            "</details>"
        )
    return "\n\n".join(parts) + "\n"


def render_markdown(grid: ResultGrid, limit: int = _MARKDOWN_LIMIT) -> str:
    """The report as Markdown: headline, legend, the grid, notes, then the failures (within ``limit`` chars)."""
    legend = "✅ passed · ❌ failed or errored (links to its failures) · 🟡 expected failure · ⏭️ skipped · — not run"
    lines = ["## Megatron compatibility", "", headline(grid), "", legend, ""]
    lines.append(table_row(["contract / case", *(_md_header(run) for run in grid.targets)]))
    lines.append("|---" * (len(grid.targets) + 1) + "|")
    for row in grid.rows:
        lines.append(table_row([_md_label(row), *(_md_cell(row.cells[run.session]) for run in grid.targets)]))
    notes = [(run.session, note) for run in grid.targets for note in run.notes]
    if notes:
        lines += ["", "### Notes", "", *(f"- {session}: {note}" for session, note in notes)]
    text = "\n".join(lines) + "\n"
    failures = grid.failures
    if not failures:
        return text
    text += "\n## Failures\n\nA red cell links to its first failure; the others of that cell follow it.\n\n"
    for shown, failure in enumerate(failures):
        entry = _md_failure(failure)
        if len(text) + len(entry) > limit:
            rest = len(failures) - shown
            return text + f"{rest} more not shown here (comment size limit): see compatibility.html.\n"
        text += entry + "\n"
    return text
