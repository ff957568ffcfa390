"""The compatibility report as Markdown: ``reports/compatibility.md``, posted as a PR comment and the job summary.

It opens on :mod:`harness.reports.markdown_overview` (findings, then a summary per subject); every case, the notes,
the failures and the advisories follow in ``<details>`` blocks (GitHub renders them folded), open when they hold a
red. Everything quoted is escaped through :mod:`harness.formats.markdown`; failures and advisories past GitHub's
comment size are left to the HTML page (:mod:`harness.reports.html`).
"""

from __future__ import annotations

import html

from harness.formats.markdown import breakable_code, code_block, code_span, table_row
from harness.reports.comparison import compare
from harness.reports.failures import KINDS, Failure
from harness.reports.findings import findings_table
from harness.reports.grouping import grouped
from harness.reports.markdown_overview import ADVISORY, MARKS, comparison_markdown, findings_markdown, summary_markdown
from harness.reports.results import (
    INSTALLED,
    Advisory,
    Cell,
    ResultGrid,
    Row,
    SubjectMatrix,
    TargetRun,
    advisory_text,
    headline,
    part_text,
)

_LEGEND = (
    "✅ passed · ❌ failed, errored or blocked (links to its failures) · 🟡 expected failure · ⏭️ skipped · "
    "⚪ not declared (the subject's declaration leaves the role out: nothing ran) · "
    f"{ADVISORY} advisories (properties a correct adapter need not meet, never a red; links to them) · "
    "— or did not run: the family checked nothing there (see the notes) · not run: the target left no reports"
)
_MARKDOWN_LIMIT = 60_000
"""GitHub refuses comment bodies over 65,536 characters; entries past this budget are left to the HTML page."""
_FAILURES = (
    "\n<details open><summary><b>Failures</b> ({count})</summary>\n\n"
    "A red cell links to its first failure; the others of that cell follow it.\n\n"
)
_ADVISORIES = (
    "\n<details><summary><b>Advisories</b> ({count})</summary>\n\nProperties a correct adapter need not meet, so "
    "none of them turns a cell red; an advisory mark links to its cell's first advisory, the others of that cell "
    "follow it.\n\n"
)
_CLOSE = "\n</details>\n"


def _md_cell(cell: Cell) -> str:
    parts = []
    for status, count in cell.parts:
        text = f"{MARKS[status]} {part_text(status, count)}"
        if status == "failed":
            text = f"[{text}](#{cell.failures[0].anchor})"
        parts.append(text)
    if cell.advisories:
        parts.append(f"[{ADVISORY} {advisory_text(len(cell.advisories))}](#{cell.advisories[0].anchor})")
    return " · ".join(parts) or "—"


def _md_header(run: TargetRun) -> str:
    """The session, then its subject (a declaration's framework package and file below its source root, else the
    file or module name; the matrix's heading has the full spec), the selection that narrowed it, and its versions
    (the matrix's pins when it recorded none)."""
    lines = [] if run.ran else ["not run"]
    if run.subject:
        lines.append(f"subject {breakable_code(run.subject.short)}")
    if run.selection:
        lines.append(f"selection {code_span(' '.join(run.selection))}")
    if run.pinned:
        lines.append("pins from matrix.yaml")
    lines += [f"{name} {html.escape(run.version(name))}" for name in INSTALLED]
    return f"{run.target_session}<br><sub>{'<br>'.join(lines)}</sub>"


def _md_label(row: Row) -> str:
    """The first cell of a row, unescaped (:func:`table_row` escapes its pipes, which GitHub splits cells on even
    inside code); names as code that wraps, so that long case names do not widen a comment's table."""
    if not row.module:
        return f"**{row.label}**"
    if row.function is None:
        suffix = f" {breakable_code(row.module)}" if row.label != row.module else ""
        return f"**{row.label}**{suffix}"
    return "&nbsp;&nbsp;&nbsp;" + breakable_code(row.label)


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


def _md_advisory(advisory: Advisory) -> str:
    """An advisory entry, laid out as a failure's: where, what property and what happened, the line that replays it."""
    parts = [
        f'### <a id="{advisory.anchor}"></a>{advisory.target} · {code_span(advisory.nodeid)}',
        f"advisory · contract {code_span(advisory.family)}",
        code_block(advisory.text),
        "Repro:",
        code_block(advisory.repro, "sh"),
    ]
    if advisory.detail:
        parts.append(f"<details><summary>Whole message</summary>\n\n{code_block(advisory.detail)}\n\n</details>")
    return "\n\n".join(parts) + "\n"


def _md_heading(matrix: SubjectMatrix) -> str:
    if matrix.subject is None:
        return "### Subject not recorded (no readable summary.json)"
    return f"### Subject {code_span(matrix.subject.spec)} ({matrix.subject.kind})"


def _md_matrix(matrix: SubjectMatrix) -> str:
    """One subject's heading and table of every case, then the messages of the families its declaration leaves out:
    folded, and open when it holds a red."""
    subject = f"<code>{html.escape(matrix.subject.spec)}</code>" if matrix.subject else "not recorded"
    lines = [f"<details{' open' if matrix.red else ''}><summary><b>Every case</b>: subject {subject}</summary>"]
    lines += ["", _md_heading(matrix), ""]
    lines.append(table_row(["contract / case", *(_md_header(run) for run in matrix.targets)]))
    lines.append("|---" * (len(matrix.targets) + 1) + "|")
    for row in matrix.rows:
        lines.append(table_row([_md_label(row), *(_md_cell(row.cells[run.session]) for run in matrix.targets)]))
    undeclared = matrix.not_declared
    if undeclared:
        lines += ["", "Not declared: the subject's declaration leaves these roles out, so their cases ran nothing.", ""]
        lines += [f"- {u.family} on {', '.join(u.sessions)}: {code_span(u.message)}" for u in undeclared]
    return "\n".join([*lines, "", "</details>"])


def _within_limit(text: str, sections: list[tuple[str, list[str]]], limit: int) -> str:
    """``text``, then each section (its folded heading, its entries, its closing tag) as far as ``limit`` allows;
    the entries past it are counted and left to the HTML page."""
    left = sum(len(entries) for _, entries in sections)
    for head, entries in sections:
        for shown, entry in enumerate(entries):
            block = ("" if shown else head.format(count=len(entries))) + entry + "\n"
            if len(text) + len(block) + len(_CLOSE) > limit:
                cut = f"{left} more not shown here (comment size limit): see compatibility.html.\n"
                return text + cut + (_CLOSE if shown else "")
            text += block
            left -= 1
        text += _CLOSE if entries else ""
    return text


def render_markdown(grid: ResultGrid, limit: int = _MARKDOWN_LIMIT, baseline: str | None = None) -> str:
    """The report as Markdown: headline, the comparison of several subjects (each against ``baseline``, else the
    first), findings, a summary per subject and the legend, then, folded, every case per subject, the notes (each
    once), the failures (open) and the advisories (within ``limit`` chars)."""
    blocks = ["## Megatron compatibility", headline(grid), *comparison_markdown(compare(grid, baseline))]
    blocks += findings_markdown(findings_table(grid.targets))
    blocks += [*(summary_markdown(matrix) for matrix in grid.matrices), _LEGEND]
    blocks += [_md_matrix(matrix) for matrix in grid.matrices]
    said = [(run.target_session, run.subject_name, note) for run in grid.targets for note in run.notes]
    notes = [f"- {where}: {note}" for where, note in grouped(said, grid.subjects_on)]
    if notes:
        blocks.append(
            "\n".join([f"<details><summary><b>Notes</b> ({len(notes)})</summary>", "", *notes, "", "</details>"])
        )
    sections = [
        (_FAILURES, [_md_failure(failure) for failure in grid.failures]),
        (_ADVISORIES, [_md_advisory(advisory) for advisory in grid.advisories]),
    ]
    return _within_limit("\n\n".join(blocks) + "\n", sections, limit)
