"""A bisect's answer as the gate's other reports show theirs: Markdown (a CI job summary, a PR comment) and one
HTML page with the compatibility report's style. One section: the last green and first red builds with their
upload dates, the cases searched, every step, then each Megatron symbol's diff between the two builds, folded."""

from __future__ import annotations

import html
from pathlib import Path

from harness.bisect.run import Result, step_text, stop_text
from harness.formats.markdown import code_block, code_span, table_row
from harness.reports.html import CSS

MARKDOWN_FILE = "bisect.md"
HTML_FILE = "bisect.html"


def headline(result: Result) -> str:
    outcome = result.outcome
    return (
        f"Last green: megatron-core {outcome.last_green.version} (uploaded {outcome.last_green.date()}); "
        f"first red: megatron-core {outcome.first_red.version} (uploaded {outcome.first_red.date()}). "
        f"Stopped: {stop_text(outcome)}."
    )


def _steps(result: Result) -> list[tuple[str, str]]:
    rows = [("good", step_text(result.good)), ("bad", step_text(result.bad))]
    return rows + [(str(step.number), step_text(step)) for step in result.outcome.steps]


def render_markdown(result: Result) -> str:
    request = result.request
    blocks = [
        f"## Bisect of megatron-core {request.good} → {request.bad}",
        headline(result),
        f"Cases searched ({len(result.selection)}): " + ", ".join(code_span(c) for c in result.selection),
        "\n".join(
            [table_row(["step", "build and verdict"]), table_row(["---", "---"])]
            + [table_row(list(r)) for r in _steps(result)]
        ),
    ]
    if result.notes:
        blocks.append("\n".join(f"- {note}" for note in result.notes))
    for diff in result.diffs:
        summary = f"{code_span(diff.symbol)} ({diff.role}): " + ("changed" if diff.diff else "unchanged")
        body = code_block(diff.diff, "diff") if diff.diff else "No change between the two builds."
        blocks.append("\n".join([f"<details><summary>{summary}</summary>", "", body, "", "</details>"]))
    return "\n\n".join(blocks) + "\n"


def render_html(result: Result) -> str:
    request = result.request
    title = f"Bisect of megatron-core {request.good} → {request.bad}"
    rows = [f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in _steps(result)]
    cases = "".join(f"<li><code>{html.escape(c)}</code></li>" for c in result.selection)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    diffs = []
    for diff in result.diffs:
        state = "changed" if diff.diff else "unchanged"
        body = f"<pre>{html.escape(diff.diff)}</pre>" if diff.diff else "<p>No change between the two builds.</p>"
        summary = f"<code>{html.escape(diff.symbol)}</code> ({html.escape(diff.role)}): {state}"
        diffs.append(f'<details class="section"><summary>{summary}</summary>{body}</details>')
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f'<p class="headline">{html.escape(headline(result))}</p>',
            f"<p>Cases searched ({len(result.selection)}):</p><ul>{cases}</ul>",
            "<table><tr><th>step</th><th>build and verdict</th></tr>",
            *rows,
            "</table>",
            *([f"<ul>{notes}</ul>"] if notes else []),
            *diffs,
            "</body></html>",
            "",
        ]
    )


def write_reports(result: Result, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / MARKDOWN_FILE
    page = directory / HTML_FILE
    markdown.write_text(render_markdown(result))
    page.write_text(render_html(result))
    return markdown, page
