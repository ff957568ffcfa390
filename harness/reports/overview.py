"""The report's summary: one row per contract family, one column per target, one short verdict per cell.

The per-case matrix answers "which case, where", at a row per test function; a reviewer bumping Megatron first asks
"which family breaks on which release", and seven targets of it must fit one screen. So a cell here is one verdict:
how many cases failed of how many (linked to the first failure, which the per-case matrix and the failure entries
hold), ``blocked`` for a family a blocker stood in for, what passed otherwise, ``not declared``, or that nothing ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.reports.results import Row, SubjectMatrix, TargetRun, part_text


@dataclass(frozen=True)
class Verdict:
    """One cell of the summary. ``status`` is the colour (a cell status, or ``none`` for nothing run); ``link`` the
    anchor of its first red, ``advisory_link`` that of its first advisory; ``why`` the session's reason for a family
    that checked nothing."""

    status: str
    text: str
    link: str | None = None
    advisories: int = 0
    advisory_link: str | None = None
    why: str | None = None


def header_version(run: TargetRun) -> str:
    """What a target's column header says under its name: the installed megatron-core, or that it did not run."""
    return run.version("megatron-core") if run.ran else "not run"


def summary_rows(matrix: SubjectMatrix) -> list[Row]:
    """The rows of the summary: the total and each family, in the matrix's order, without their cases."""
    return [row for row in matrix.rows if row.function is None]


def verdict(row: Row, run: TargetRun) -> Verdict:
    """The verdict of one family (or the total) on one target, worst first: a blocker, failures, then what ran."""
    if not run.ran:
        return Verdict("none", "not run")
    cell = row.cells[run.session]
    reason = run.summary.not_run.get(row.label) if run.summary and row.module else None
    advisories = len(cell.advisories)
    marks = {"advisories": advisories, "advisory_link": cell.advisories[0].anchor if advisories else None}
    first_red = cell.failures[0].anchor if cell.failures else None
    if reason is not None and reason.startswith("blocked"):
        return Verdict("failed", "blocked", first_red, why=reason, **marks)
    failed = cell.counts["failed"]
    if failed:
        return Verdict("failed", f"{failed} of {len(cell.results)} failed", first_red, **marks)
    if not cell.results:
        return Verdict("none", "did not run", why=reason)
    shown = [(status, count) for status, count in cell.parts if status != "skipped"] or cell.parts
    return Verdict(cell.status, " · ".join(part_text(status, count) for status, count in shown), **marks)
