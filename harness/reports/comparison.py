"""Before and after, per target: what a second subject fixes, breaks and shares with the first.

A reviewer of a pull request that upgrades an adapter runs the gate on both declarations in one run
(``MEGATRON_CONFORMANCE_SUBJECT=before.toml,after.toml``) and asks one question per target: which reds are new, which
are fixed, which stay. Reds are the same when their case id is; a family a blocker stood in for and an expected
failure are compared the same way, and advisories are counted. With more than two subjects, each is compared with the
first, or with the baseline named by ``nox -s report -- --baseline <label>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.formats import red_section
from harness.formats.environment import repro_environment
from harness.reports.results import ReportError, ResultGrid, SubjectMatrix, TargetRun

KINDS = {"red": "red", "blocked": "blocked family", "xfail": "expected failure"}
"""What each kind of compared entry is called in both renderings."""


@dataclass(frozen=True)
class Entry:
    """One red, blocked family or expected failure of one subject on one target, with the line that replays it and,
    for a red, the anchor of its failure entry."""

    kind: str
    case: str
    repro: str
    anchor: str | None = None


@dataclass
class Pair:
    """One target's comparison of a subject with the baseline: what it fixes (the baseline's entries it lacks), what
    is new in it, what both have, and both advisory counts. ``missing`` names a side that did not run there: nothing
    is compared then."""

    target: str
    baseline: str
    other: str
    fixed: list[Entry] = field(default_factory=list)
    new: list[Entry] = field(default_factory=list)
    shared: list[Entry] = field(default_factory=list)
    advisories: tuple[int, int] = (0, 0)
    missing: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        """Whether nothing was fixed and nothing is new."""
        return not self.fixed and not self.new

    def summary(self) -> list[tuple[str, str]]:
        """The cell of this pair in the comparison table: ``(status, text)`` parts, worst first."""
        if self.missing:
            return [("none", "not compared")]
        parts = [("failed", f"{len(self.new)} new")] if self.new else []
        parts += [("passed", f"{len(self.fixed)} fixed")] if self.fixed else []
        parts += [("", f"{len(self.shared)} shared")] if self.shared else []
        parts = parts or [("", "no change")]
        before, after = self.advisories
        return parts + ([("advisory", f"advisories {before} → {after}")] if before != after else [])


CHANGE_FOLDS = (("New against the baseline", ("new",), True), ("Fixed and shared", ("fixed", "shared"), False))
"""The folds below the comparison table: their title, what they list, and whether they start open (new reds do)."""


def change_folds(pairs: list[Pair]) -> list[tuple[str, bool, list[tuple[Pair, str, Entry]]]]:
    """Each fold that has something to list: its title, whether it is open, and every change in it (the pair, what
    happened, the entry), target by target."""
    folds = []
    for title, kinds, opened in CHANGE_FOLDS:
        changes = [(pair, what, entry) for pair in pairs for what in kinds for entry in getattr(pair, what)]
        if changes:
            folds.append((title, opened, changes))
    return folds


def by_subject(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """The pairs of each compared subject, in target order: a row of the comparison table each."""
    found: dict[str, list[Pair]] = {}
    for pair in pairs:
        found.setdefault(pair.other, []).append(pair)
    return found


def _repro_environment(run: TargetRun) -> dict[str, str]:
    summary = run.summary
    return repro_environment(summary.subject, summary.matrix) if summary else {}


def entries(run: TargetRun) -> dict[tuple[str, str], Entry]:
    """Everything compared of one run, keyed by kind and case id (a family's name for a blocked family)."""
    found: dict[tuple[str, str], Entry] = {}
    environment = _repro_environment(run)
    for result in run.results:
        if result.failure:
            found["red", result.nodeid] = Entry("red", result.nodeid, result.failure.repro, result.failure.anchor)
        elif result.status == "xfailed":
            repro = red_section.repro_line(run.target_session, result.nodeid, environment)
            found["xfail", result.nodeid] = Entry("xfail", result.nodeid, repro)
    blocked = run.summary.not_run if run.summary else {}
    for family, why in blocked.items():
        if why.startswith("blocked"):
            repro = red_section.repro_line(run.target_session, "cases", environment)
            found["blocked", family] = Entry("blocked", family, repro)
    return found


def baseline_of(grid: ResultGrid, label: str | None = None) -> SubjectMatrix:
    """The subject the others are compared with: the one labelled ``label``, else the first the run checked."""
    if label is None:
        return grid.recorded[0] if grid.recorded else grid.matrices[0]
    for matrix in grid.recorded:
        if matrix.label == label:
            return matrix
    known = ", ".join(repr(matrix.label) for matrix in grid.recorded) or "none recorded"
    raise ReportError(f"--baseline {label!r} names no subject of this report (its subjects: {known})")


def _run_on(matrix: SubjectMatrix, target: str) -> TargetRun | None:
    return next((run for run in matrix.runs if run.target_session == target), None)


def compare(grid: ResultGrid, baseline: str | None = None) -> list[Pair]:
    """Per target in version order, each other subject against the baseline; nothing for a report of one subject."""
    if not grid.several:
        return []
    first = baseline_of(grid, baseline)
    pairs = []
    for target in grid.target_sessions:
        before = _run_on(first, target)
        for matrix in grid.recorded:
            if matrix is first:
                continue
            after = _run_on(matrix, target)
            pair = Pair(target, first.label, matrix.label)
            pair.missing = [m.label for m, run in ((first, before), (matrix, after)) if run is None]
            if before is not None and after is not None:
                old, new = entries(before), entries(after)
                pair.fixed = [entry for key, entry in old.items() if key not in new]
                pair.new = [entry for key, entry in new.items() if key not in old]
                pair.shared = [entry for key, entry in new.items() if key in old]
                pair.advisories = (len(before.advisories), len(after.advisories))
            pairs.append(pair)
    return pairs
