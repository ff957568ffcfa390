"""Two builds compared, as the gate's other reports show their results: Markdown (a CI job summary, a PR comment)
and one HTML page with the compatibility report's style. A bisect and an early warning each write one section: the
last green and first red builds (or the release and the candidate) with their upload dates, the cases, the steps
taken, then each Megatron symbol's source diff between the two builds, folded."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from harness.bisect.run import Result, step_text, stop_text
from harness.bisect.symbol_diff import SymbolDiff
from harness.formats.markdown import code_block, code_span, table_row
from harness.reports.html import CSS


@dataclass(frozen=True)
class Section:
    """One comparison of two builds: its title and headline, the cases it is about, a table of what ran (label,
    what it said), notes, and the diffs."""

    title: str
    headline: str
    cases_label: str
    cases: tuple[str, ...]
    rows: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    diffs: tuple[SymbolDiff, ...] = field(default_factory=tuple)


def bisect_headline(result: Result) -> str:
    outcome = result.outcome
    return (
        f"Last green: megatron-core {outcome.last_green.version} (uploaded {outcome.last_green.date()}); "
        f"first red: megatron-core {outcome.first_red.version} (uploaded {outcome.first_red.date()}). "
        f"Stopped: {stop_text(outcome)}."
    )


def bisect_section(result: Result) -> Section:
    steps = [("good", step_text(result.good)), ("bad", step_text(result.bad))]
    steps += [(str(step.number), step_text(step)) for step in result.outcome.steps]
    return Section(
        f"Bisect of megatron-core {result.request.good} → {result.request.bad}",
        bisect_headline(result),
        "Cases searched",
        result.selection,
        tuple(steps),
        tuple(result.notes),
        tuple(result.diffs),
    )


def _diff_summary(diff: SymbolDiff) -> str:
    return f"{diff.symbol} ({diff.role}): " + ("changed" if diff.diff else "unchanged")


def render_markdown(sections: list[Section]) -> str:
    blocks = []
    for section in sections:
        blocks += [f"## {section.title}", section.headline]
        if section.cases:
            blocks.append(f"{section.cases_label} ({len(section.cases)}): " + ", ".join(map(code_span, section.cases)))
        if section.rows:
            table = [table_row(["", "build and verdict"]), table_row(["---", "---"])]
            blocks.append("\n".join(table + [table_row(list(row)) for row in section.rows]))
        if section.notes:
            blocks.append("\n".join(f"- {note}" for note in section.notes))
        for diff in section.diffs:
            body = code_block(diff.diff, "diff") if diff.diff else "No change between the two builds."
            summary = html.escape(_diff_summary(diff))
            blocks.append("\n".join([f"<details><summary>{summary}</summary>", "", body, "", "</details>"]))
    return "\n\n".join(blocks) + "\n"


def render_html(sections: list[Section], title: str) -> str:
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for section in sections:
        lines += [f"<h2>{html.escape(section.title)}</h2>", f'<p class="headline">{html.escape(section.headline)}</p>']
        if section.cases:
            items = "".join(f"<li><code>{html.escape(c)}</code></li>" for c in section.cases)
            lines.append(f"<p>{html.escape(section.cases_label)} ({len(section.cases)}):</p><ul>{items}</ul>")
        if section.rows:
            rows = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in section.rows)
            lines.append(f"<table><tr><th></th><th>build and verdict</th></tr>{rows}</table>")
        if section.notes:
            lines.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
        for diff in section.diffs:
            body = f"<pre>{html.escape(diff.diff)}</pre>" if diff.diff else "<p>No change between the two builds.</p>"
            summary = html.escape(_diff_summary(diff))
            lines.append(f'<details class="section"><summary>{summary}</summary>{body}</details>')
    return "\n".join([*lines, "</body></html>", ""])


def write_reports(sections: list[Section], directory: Path, stem: str, title: str) -> tuple[Path, Path]:
    """``<stem>.md`` and ``<stem>.html`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    markdown, page = directory / f"{stem}.md", directory / f"{stem}.html"
    markdown.write_text(render_markdown(sections))
    page.write_text(render_html(sections, title))
    return markdown, page
