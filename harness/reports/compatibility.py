"""The compatibility report: every target session's results merged into one matrix.

Each target session leaves ``reports/<session>/junit.xml`` and ``summary.json``, on one machine or as one CI artifact
per matrix job. Reading those files back (no venv, no Megatron) gives the table a reviewer reads before bumping
Megatron: targets as columns with the versions actually installed, contracts and their cases as rows, every red linked
to what failed and to the line that replays it. ``nox -s report`` writes it as ``reports/compatibility.md`` (a PR
comment, the job summary) and ``reports/compatibility.html`` (one self-contained page, no scripts, no network).
"""

from __future__ import annotations

import ast
import html
import itertools
import json
import re
import shlex
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.plugin.subjects import REFERENCE_SUBJECT, SUBJECT_ENV_VAR

STATUSES = ("failed", "xfailed", "passed", "skipped")
"""Cell statuses, worst first: a cell shows the colour of the first one present."""
MARKS = {"failed": "❌", "xfailed": "🟡", "passed": "✅", "skipped": "⏭️"}
WORDS = {"failed": "failed", "xfailed": "xfail", "passed": "passed", "skipped": "skipped"}
KINDS = {
    "failure": "failed",
    "error": "error (setup, teardown or collection)",
    "xpass": "passed though listed as an expected failure (strict)",
}
INSTALLED = ("megatron-core", "torch", "numpy", "python")
COLLECTION = "(collection)"
MESSAGE_LINES = 4
LINE_CHARS = 300
EXAMPLE_LINES = 40
FIXTURE_ARGUMENTS = ("subject", "target")
"""Fixtures every case takes: the same in all examples of a session (the target's repr alone runs to 25 lines)."""
MARKDOWN_LIMIT = 60_000
"""GitHub refuses comment bodies over 65,536 characters; failures past this budget are left to the HTML page."""

_SECTION = re.compile(r"^target (\S+) \| contract (\S+) \| symbol (.+)$", re.MULTILINE)
_REPRO = re.compile(r"^repro: (.+)$", re.MULTILINE)
_BLOB = re.compile(r"@reproduce_failure\([^)]*\)")
_EXAMPLE = re.compile(r"^(?:E\s+)?((?:Falsifying example|Failing test case): .*)$")
_TRUNCATED = re.compile(r"^\[\+\d+ more lines; full report in element text\]$")


class ReportError(RuntimeError):
    """There is nothing to report; the message says where the target sessions were looked for."""


@dataclass(frozen=True)
class Failure:
    """One red (failure, error or strict XPASS) on one target, with what is needed to replay it."""

    target: str
    nodeid: str
    kind: str
    message: tuple[str, ...]
    repro: str
    anchor: str
    contract: str | None = None
    symbol: str | None = None
    blob: str | None = None
    example: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseResult:
    """One test id's verdict on one target; ``function`` groups the parametrized ids of one test function."""

    module: str
    function: str
    nodeid: str
    status: str
    failure: Failure | None = None


@dataclass
class TargetRun:
    """What one target session left behind: its summary, per-test verdicts, and anything odd about the run."""

    session: str
    summary: dict[str, Any]
    results: list[CaseResult]
    notes: list[str]

    def installed(self, name: str) -> str:
        """The installed version of ``name`` as the session recorded it, ``?`` when it did not."""
        return str((self.summary.get("installed") or {}).get(name) or "?")


@dataclass
class Cell:
    """The verdicts of one row on one target."""

    results: list[CaseResult] = field(default_factory=list)

    @property
    def counts(self) -> Counter[str]:
        return Counter(result.status for result in self.results)

    @property
    def status(self) -> str:
        """The worst status present; ``none`` when the target ran nothing of this row."""
        counts = self.counts
        return next((status for status in STATUSES if counts[status]), "none")

    @property
    def failures(self) -> list[Failure]:
        return [result.failure for result in self.results if result.failure]


@dataclass
class Row:
    """A contract family (``function`` is None), one test function of it, or the total (``module`` is empty)."""

    module: str
    function: str | None
    label: str
    cells: dict[str, Cell]


@dataclass
class Matrix:
    """The whole report: targets in version order, rows (total, then each family followed by its cases)."""

    targets: list[TargetRun]
    rows: list[Row]

    @property
    def failures(self) -> list[Failure]:
        """Every red, target by target, in row order; a cell's failures are therefore consecutive."""
        return [r.failure for run in self.targets for r in run.results if r.failure]


def natural_key(name: str) -> list[Any]:
    """Sort key under which megatron-0.9 comes before megatron-0.13."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _split_classname(classname: str) -> tuple[str, list[str]]:
    """Module path and class names of a JUnit test case; test classes are the capitalised trailing parts."""
    parts = classname.split(".")
    first_class = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    return "/".join(parts[:first_class]) + ".py", parts[first_class:]


def _message_lines(message: str) -> tuple[str, ...]:
    """The first lines of the assertion message, up to hypothesis' example (shown on its own)."""
    lines = []
    for line in message.splitlines():
        if _EXAMPLE.match(line):
            break
        if line.strip() and not _TRUNCATED.match(line.strip()):
            lines.append(line.rstrip())
    return tuple(line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…" for line in lines[:MESSAGE_LINES])


def _example(text: str) -> tuple[str, ...]:
    """Hypothesis' falsifying example as it printed it (pytest's ``E`` prefix removed), until its call closes."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        header = _EXAMPLE.match(line)
        if not header:
            continue
        prefix = line[: header.start(1)]
        block = [header.group(1)]
        depth = block[0].count("(") - block[0].count(")")
        for follower in lines[start + 1 :]:
            if depth <= 0:
                break
            follower = follower.removeprefix(prefix).rstrip()
            block.append(follower)
            depth += follower.count("(") - follower.count(")")
        return _without_fixtures(block)[:EXAMPLE_LINES]
    return ()


def _without_fixtures(block: list[str]) -> tuple[str, ...]:
    """The example's call without the arguments that are the same for every example of a session."""
    kept, skipping = [block[0]], False
    for line in block[1:]:
        argument = re.match(r"^ {4}(\w+)=", line)
        if argument:
            skipping = argument.group(1) in FIXTURE_ARGUMENTS
        elif not line.startswith(" "):
            skipping = False
        if not skipping:
            kept.append(line)
    return tuple(kept)


def repro_fallback(session: str, nodeid: str, subject: str | None) -> str:
    """The repro line the gate plugin would print, for reds it could not annotate (strict XPASS, collection)."""
    prefix = "" if subject in (None, REFERENCE_SUBJECT) else f"{SUBJECT_ENV_VAR}={shlex.quote(subject)} "
    return f"{prefix}nox -R -s {session} -- {shlex.quote(nodeid)}"


def parse_failure(element: ET.Element, session: str, nodeid: str, subject: str | None, anchor: str) -> Failure:
    """A ``<failure>`` or ``<error>`` element read into a :class:`Failure`."""
    text = element.text or ""
    message = element.get("message") or text
    kind = "xpass" if message.startswith("[XPASS(strict)]") else element.tag
    section = _SECTION.search(text)
    repro = _REPRO.search(text)
    blob = _BLOB.search(text)
    return Failure(
        target=session,
        nodeid=nodeid,
        kind=kind,
        message=_message_lines(message),
        repro=repro.group(1).strip() if repro else repro_fallback(session, nodeid, subject),
        anchor=anchor,
        contract=section.group(2) if section else None,
        symbol=section.group(3).strip() if section else None,
        blob=blob.group(0) if blob else None,
        example=_example(text),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def parse_junit(root: ET.Element, session: str, subject: str | None) -> list[CaseResult]:
    """Every test case of a JUnit document, sorted in row order, failures numbered for their anchors."""
    pending = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if classname:
            module, classes = _split_classname(classname)
            function = "::".join([*classes, name.split("[", 1)[0]])
            nodeid = "::".join([module, *classes, name])
        else:
            module, function = name.replace(".", "/") + ".py", COLLECTION
            nodeid = module
        pending.append((module, function, nodeid, case))
    pending.sort(key=lambda item: item[:3])
    results, numbers = [], itertools.count(1)
    for module, function, nodeid, case in pending:
        red = next((child for child in case if child.tag in ("failure", "error")), None)
        skipped = next((child for child in case if child.tag == "skipped"), None)
        if red is not None:
            failure = parse_failure(red, session, nodeid, subject, f"fail-{_slug(session)}-{next(numbers)}")
            results.append(CaseResult(module, function, nodeid, "failed", failure))
        elif skipped is not None:
            status = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
            results.append(CaseResult(module, function, nodeid, status))
        else:
            results.append(CaseResult(module, function, nodeid, "passed"))
    return results


def load_target(directory: Path) -> TargetRun:
    """One target session folder; a missing or unreadable file becomes a note, not an exception."""
    session, notes = directory.name, []
    summary: dict[str, Any] = {}
    if not directory.is_dir():
        notes.append("not run: no reports of it here, or its session stopped before pytest (see its log)")
        return TargetRun(session, summary, [], notes)
    summary_path, junit_path = directory / "summary.json", directory / "junit.xml"
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except ValueError as err:
            notes.append(f"summary.json is unreadable ({err}); installed versions unknown")
    else:
        notes.append("no summary.json: the session stopped before pytest finished; installed versions unknown")
    results: list[CaseResult] = []
    if junit_path.is_file():
        try:
            results = parse_junit(ET.parse(junit_path).getroot(), session, summary.get("subject"))
        except ET.ParseError as err:
            notes.append(f"junit.xml is unreadable ({err}); no verdicts")
    else:
        notes.append("no junit.xml: no verdicts (did the install fail? see the session's log)")
    exit_status = summary.get("exit_status", 0)
    if exit_status not in (0, None) and not any(r.failure for r in results):
        notes.append(f"pytest exited with status {exit_status} without a failing test: see the session's log")
    notes += [
        f"stale expected failure: {prefix!r} matches no test" for prefix in summary.get("stale_expected_failures", [])
    ]
    return TargetRun(session, summary, results, notes)


def declared_contract(path: Path) -> str | None:
    """The contract a case module declares with ``pytestmark = pytest.mark.contract("name", ...)``, if it does."""
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)):
            continue
        call = node.value
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "attr", None) == "contract"
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            return str(call.args[0].value)
    return None


def _cells(targets: list[TargetRun], keep: Callable[[CaseResult], bool]) -> dict[str, Cell]:
    return {run.session: Cell([r for r in run.results if keep(r)]) for run in targets}


def build_matrix(targets: list[TargetRun], root: Path) -> Matrix:
    """Rows for the targets' results: the total, then per case module its family row and one row per function."""
    rows = [Row("", None, "all cases", _cells(targets, lambda r: True))]
    results = [r for run in targets for r in run.results]
    for module in sorted({r.module for r in results}):
        named = next(
            (r.failure.contract for r in results if r.module == module and r.failure and r.failure.contract), None
        )
        contract = declared_contract(root / module) or named
        rows.append(Row(module, None, contract or module, _cells(targets, lambda r, m=module: r.module == m)))
        for function in sorted({r.function for r in results if r.module == module}):
            cells = _cells(targets, lambda r, m=module, f=function: r.module == m and r.function == f)
            rows.append(Row(module, function, function, cells))
    return Matrix(targets, rows)


def collect(reports: Path, root: Path, expected: Iterable[str] = ()) -> Matrix:
    """The matrix of every target session under ``reports``, plus a column for each ``expected`` one that left none.

    A target whose install failed leaves no folder (and in CI no artifact); naming the matrix's targets keeps it in
    the report as a column that was not run. Case modules are read under ``root`` for their contract names.
    """
    found = {
        p.name
        for p in (reports.iterdir() if reports.is_dir() else ())
        if p.is_dir() and any((p / name).is_file() for name in ("junit.xml", "summary.json"))
    }
    if not found:
        raise ReportError(
            f"no target session in {reports}: expected <session>/junit.xml or <session>/summary.json there; "
            "run a target first (nox -s megatron-0.15) or download the gate's artifacts into it"
        )
    sessions = found | set(expected)
    return build_matrix([load_target(reports / name) for name in sorted(sessions, key=natural_key)], root)


def headline(matrix: Matrix) -> str:
    """One sentence: how many targets, and which are red."""
    red = [run for run in matrix.targets if any(r.failure for r in run.results)]
    count = f"{len(matrix.targets)} target{'s' if len(matrix.targets) != 1 else ''}"
    if not red:
        return f"{count}, no failure."
    names = ", ".join(f"{run.session} ({sum(1 for r in run.results if r.failure)})" for run in red)
    return f"{count}; failures on {names}."


def _cell_parts(cell: Cell) -> list[tuple[str, int]]:
    counts = cell.counts
    return [(status, counts[status]) for status in STATUSES if counts[status]]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    """An inline code span that survives backticks in ``text``."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(text: str, language: str = "text") -> str:
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _md_cell(cell: Cell) -> str:
    if not cell.results:
        return "—"
    parts = []
    for status, count in _cell_parts(cell):
        text = f"{MARKS[status]} {count} {WORDS[status]}"
        if status == "failed":
            text = f"[{text}](#{cell.failures[0].anchor})"
        parts.append(text)
    return " · ".join(parts)


def _md_header(run: TargetRun) -> str:
    pins = "<br>".join(f"{name} {html.escape(run.installed(name))}" for name in INSTALLED)
    return f"{run.session}<br><sub>{pins}</sub>"


def _md_label(row: Row) -> str:
    """The first cell of a row; pipes are escaped, as GitHub splits table cells on them even inside code."""
    if not row.module:
        return f"**{row.label}**"
    if row.function is None:
        suffix = f" {_code(row.module)}" if row.label != row.module else ""
        return _md_escape(f"**{row.label}**{suffix}")
    return "&nbsp;&nbsp;&nbsp;" + _md_escape(_code(row.label))


def _md_failure(failure: Failure) -> str:
    facts = [KINDS[failure.kind]]
    if failure.contract:
        facts.append(f"contract {_code(failure.contract)}")
    if failure.symbol:
        facts.append(f"symbol {_code(failure.symbol)}")
    parts = [
        f'### <a id="{failure.anchor}"></a>{failure.target} · {_code(failure.nodeid)}',
        " · ".join(facts),
        _block("\n".join(failure.message) or "(no message)"),
        "Repro:",
        _block(failure.repro, "sh"),
    ]
    if failure.blob:
        parts.append(f"Hypothesis replays this example with {_code(failure.blob)} as a decorator on the test.")
    if failure.example:
        parts.append(
            f"<details><summary>Falsifying example</summary>\n\n{_block(chr(10).join(failure.example))}\n\n</details>"
        )
    return "\n\n".join(parts) + "\n"


def render_markdown(matrix: Matrix, limit: int = MARKDOWN_LIMIT) -> str:
    """The report as Markdown: headline, legend, the matrix, notes, then the failures (within ``limit`` chars)."""
    legend = "✅ passed · ❌ failed or errored (links to its failures) · 🟡 expected failure · ⏭️ skipped · — not run"
    lines = ["## Megatron compatibility", "", headline(matrix), "", legend, ""]
    lines.append("| contract / case | " + " | ".join(_md_header(run) for run in matrix.targets) + " |")
    lines.append("|---" * (len(matrix.targets) + 1) + "|")
    for row in matrix.rows:
        cells = " | ".join(_md_cell(row.cells[run.session]) for run in matrix.targets)
        lines.append(f"| {_md_label(row)} | {cells} |")
    notes = [(run.session, note) for run in matrix.targets for note in run.notes]
    if notes:
        lines += ["", "### Notes", "", *(f"- {session}: {note}" for session, note in notes)]
    text = "\n".join(lines) + "\n"
    failures = matrix.failures
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


CSS = """
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
    for status, count in _cell_parts(cell):
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


def render_html(matrix: Matrix) -> str:
    """The report as one HTML page: the same matrix with coloured cells, anchors to every failure, inline CSS."""
    head = "".join(
        f'<th scope="col">{html.escape(run.session)}<span class="pins">'
        + "<br>".join(f"{name} {html.escape(run.installed(name))}" for name in INSTALLED)
        + "</span></th>"
        for run in matrix.targets
    )
    body = "\n".join(_html_row(row, matrix.targets) for row in matrix.rows)
    legend = (
        '<p class="legend">'
        '<span style="background:#d2f4dc">passed</span><span style="background:#ffd7d5">failed or errored</span>'
        '<span style="background:#fff0b3">expected failure (xfail)</span>'
        '<span style="background:#eceff1">skipped</span><span>— not run</span></p>'
    )
    notes = [
        f"<li>{html.escape(run.session)}: {html.escape(note)}</li>" for run in matrix.targets for note in run.notes
    ]
    failures = [_html_failure(failure) for failure in matrix.failures]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Megatron compatibility</title><style>{CSS}</style></head><body>",
            "<h1>Megatron compatibility</h1>",
            f"<p>{html.escape(headline(matrix))}</p>",
            legend,
            f'<table class="matrix"><thead><tr><th scope="col">contract / case</th>{head}</tr></thead>',
            f"<tbody>\n{body}\n</tbody></table>",
            *(["<h2>Notes</h2>", "<ul>", *notes, "</ul>"] if notes else []),
            *(["<h2>Failures</h2>", *failures] if failures else []),
            "</body></html>",
            "",
        ]
    )


def write_reports(reports: Path, root: Path, expected: Iterable[str] = ()) -> tuple[Matrix, Path, Path]:
    """Collect ``reports`` and write ``compatibility.md`` and ``compatibility.html`` beside the session folders."""
    matrix = collect(reports, root, expected)
    markdown, page = reports / "compatibility.md", reports / "compatibility.html"
    markdown.write_text(render_markdown(matrix))
    page.write_text(render_html(matrix))
    return matrix, markdown, page
