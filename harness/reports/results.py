"""The compatibility report's model: what every target session left behind, read back into one grid of results.

Each target session leaves ``reports/<session>/junit.xml`` and ``summary.json``, on one machine or as one CI artifact
per matrix job. Reading those files back (no venv, no Megatron) gives targets as columns with the versions actually
installed, contract families and their test functions as rows, and every red with what failed and the line that
replays it. JUnit is read through :mod:`harness.formats.junit`, the plugin's red section through
:mod:`harness.formats.red_section`, family names from :mod:`harness.plugin.families`; the renderings are
:mod:`harness.reports.markdown` and :mod:`harness.reports.html`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element, ParseError

from harness.formats import red_section
from harness.formats.junit import JUnitCase, read_cases
from harness.plugin.families import family_of_case
from harness.plugin.subjects import REFERENCE_SUBJECT, SUBJECT_ENV_VAR

_STATUSES = ("failed", "xfailed", "passed", "skipped")
"""Cell statuses, worst first: a cell shows the colour of the first one present."""
WORDS = {"failed": "failed", "xfailed": "xfail", "passed": "passed", "skipped": "skipped"}
"""What each status is called in a cell, in both renderings."""
KINDS = {
    "failure": "failed",
    "error": "error (setup, teardown or collection)",
    "xpass": "passed though listed as an expected failure (strict)",
}
"""What each kind of red is called in its failure entry, in both renderings."""
INSTALLED = ("megatron-core", "torch", "numpy", "python")
"""The installed versions a target's column header shows, in this order."""
_COLLECTION = "(collection)"
_MESSAGE_LINES = 4
_LINE_CHARS = 300
_EXAMPLE_LINES = 40
_FIXTURE_ARGUMENTS = ("subject", "target")
"""Fixtures every case takes: the same in all examples of a session (the target's repr alone runs to 25 lines)."""

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
    def parts(self) -> list[tuple[str, int]]:
        """Each status present with its count, worst first: what a rendered cell lists."""
        counts = self.counts
        return [(status, counts[status]) for status in _STATUSES if counts[status]]

    @property
    def status(self) -> str:
        """The worst status present; ``none`` when the target ran nothing of this row."""
        counts = self.counts
        return next((status for status in _STATUSES if counts[status]), "none")

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
class ResultGrid:
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


def _message_lines(message: str) -> tuple[str, ...]:
    """The first lines of the assertion message, up to hypothesis' example (shown on its own)."""
    lines = []
    for line in message.splitlines():
        if _EXAMPLE.match(line):
            break
        if line.strip() and not _TRUNCATED.match(line.strip()):
            lines.append(line.rstrip())
    return tuple(line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…" for line in lines[:_MESSAGE_LINES])


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
        return _without_fixtures(block)[:_EXAMPLE_LINES]
    return ()


def _without_fixtures(block: list[str]) -> tuple[str, ...]:
    """The example's call without the arguments that are the same for every example of a session."""
    kept, skipping = [block[0]], False
    for line in block[1:]:
        argument = re.match(r"^ {4}(\w+)=", line)
        if argument:
            skipping = argument.group(1) in _FIXTURE_ARGUMENTS
        elif not line.startswith(" "):
            skipping = False
        if not skipping:
            kept.append(line)
    return tuple(kept)


def _parse_failure(element: Element, session: str, nodeid: str, subject: str | None, anchor: str) -> Failure:
    """A ``<failure>`` or ``<error>`` element read into a :class:`Failure`; a red the gate plugin could not annotate
    (strict XPASS, collection) gets the repro line the plugin would have printed."""
    text = element.text or ""
    message = element.get("message") or text
    kind = "xpass" if message.startswith("[XPASS(strict)]") else element.tag
    section, repro = red_section.parse(text)
    if repro is None:
        environment = {} if subject in (None, REFERENCE_SUBJECT) else {SUBJECT_ENV_VAR: subject}
        repro = red_section.repro_line(session, nodeid, environment)
    blob = _BLOB.search(text)
    return Failure(
        target=session,
        nodeid=nodeid,
        kind=kind,
        message=_message_lines(message),
        repro=repro,
        anchor=anchor,
        contract=section.contract if section else None,
        symbol=section.symbol if section else None,
        blob=blob.group(0) if blob else None,
        example=_example(text),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _case_results(cases: Iterable[JUnitCase], session: str, subject: str | None) -> list[CaseResult]:
    """The JUnit cases of one session, sorted in row order, failures numbered for their anchors."""
    pending = sorted(
        ((case.module, case.function if case.name else _COLLECTION, case.nodeid, case) for case in cases),
        key=lambda item: item[:3],
    )
    results, numbers = [], itertools.count(1)
    for module, function, nodeid, case in pending:
        failure = None
        if case.verdict == "failed" and case.detail is not None:
            failure = _parse_failure(case.detail, session, nodeid, subject, f"fail-{_slug(session)}-{next(numbers)}")
        results.append(CaseResult(module, function, nodeid, case.verdict, failure))
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
            results = _case_results(read_cases(junit_path), session, summary.get("subject"))
        except ParseError as err:
            notes.append(f"junit.xml is unreadable ({err}); no verdicts")
    else:
        notes.append("no junit.xml: no verdicts (did the install fail? see the session's log)")
    exit_status = summary.get("exit_status", 0)
    if exit_status not in (0, None) and not any(r.failure for r in results):
        notes.append(f"pytest exited with status {exit_status} without a failing test: see the session's log")
    notes += [
        f"stale expected failure: {prefix!r} matches no test" for prefix in summary.get("stale_expected_failures", [])
    ]
    notes += [
        f"waived by the subject's declaration: {w['kind']} {w['name']} (allowed by {w['allowed_by']!r})"
        for w in summary.get("waivers", [])
    ]
    notes += [f"finding ({f['family']}): {f['text']}" for f in summary.get("findings", [])]
    return TargetRun(session, summary, results, notes)


def _contract_name(module: str, results: Iterable[CaseResult]) -> str | None:
    """The contract of a case module: its family in the table, else the one its reds name in their red section."""
    family = family_of_case(module)
    if family is not None:
        return family.name
    return next((r.failure.contract for r in results if r.module == module and r.failure and r.failure.contract), None)


def _cells(targets: list[TargetRun], keep: Callable[[CaseResult], bool]) -> dict[str, Cell]:
    return {run.session: Cell([r for r in run.results if keep(r)]) for run in targets}


def _build_grid(targets: list[TargetRun]) -> ResultGrid:
    """Rows for the targets' results: the total, then per case module its family row and one row per function."""
    rows = [Row("", None, "all cases", _cells(targets, lambda r: True))]
    results = [r for run in targets for r in run.results]
    for module in sorted({r.module for r in results}):
        label = _contract_name(module, results) or module
        rows.append(Row(module, None, label, _cells(targets, lambda r, m=module: r.module == m)))
        for function in sorted({r.function for r in results if r.module == module}):
            cells = _cells(targets, lambda r, m=module, f=function: r.module == m and r.function == f)
            rows.append(Row(module, function, function, cells))
    return ResultGrid(targets, rows)


def collect(reports: Path, expected: Iterable[str] = ()) -> ResultGrid:
    """The grid of every target session under ``reports``, plus a column for each ``expected`` one that left none.

    A target whose install failed leaves no folder (and in CI no artifact); naming the matrix's targets keeps it in
    the report as a column that was not run. Contract names come from the families table.
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
    return _build_grid([load_target(reports / name) for name in sorted(sessions, key=natural_key)])


def headline(grid: ResultGrid) -> str:
    """One sentence: how many targets, and which are red."""
    red = [run for run in grid.targets if any(r.failure for r in run.results)]
    count = f"{len(grid.targets)} target{'s' if len(grid.targets) != 1 else ''}"
    if not red:
        return f"{count}, no failure."
    names = ", ".join(f"{run.session} ({sum(1 for r in run.results if r.failure)})" for run in red)
    return f"{count}; failures on {names}."
