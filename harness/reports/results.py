"""The compatibility report's model: what every target session left behind, read back into one grid of results.

Each target session leaves ``reports/<session>/junit.xml`` and ``summary.json``, on one machine or as one CI artifact
per matrix job. Reading those files back (no venv, no Megatron) gives targets as columns with the versions actually
installed (the matrix's pins for a target that recorded none), contract families and their test functions as rows,
every red with what failed and the line that replays it, and every advisory with its line too. Sessions that ran
different subjects are never merged: each subject gets a matrix of its own. JUnit is read through
:mod:`harness.formats.junit`, the plugin's red section through :mod:`harness.formats.red_section`, family names from
:mod:`harness.plugin.families`, pins from :mod:`harness.targets.matrix`; the renderings are
:mod:`harness.reports.markdown` and :mod:`harness.reports.html`.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import ParseError

from harness.formats.environment import launcher, repro_environment
from harness.formats.junit import JUnitCase, read_cases
from harness.formats.not_declared import is_not_declared
from harness.formats.summary import FILE_NAME as SUMMARY_FILE
from harness.formats.summary import SessionSummary, SummaryError, read_summary
from harness.plugin.families import family_of_case
from harness.reports.failures import Failure, parse_failure
from harness.subjects.declaration import DeclarationFileError, read_declaration_file
from harness.targets.matrix import Target

_STATUSES = ("failed", "xfailed", "passed", "undeclared", "skipped")
"""Cell statuses, worst first: a cell shows the colour of the first one present."""
WORDS = {"failed": "failed", "xfailed": "xfail", "passed": "passed", "undeclared": "not declared", "skipped": "skipped"}
"""What each status is called in a cell, in both renderings."""
INSTALLED = ("megatron-core", "torch", "numpy", "python")
"""The installed versions a target's column header shows, in this order."""
_COLLECTION = "(collection)"


NO_SUBJECT = "subject not recorded (no readable summary.json)"
"""What a subject is called where no target left a summary naming it."""


class ReportError(RuntimeError):
    """There is nothing to report; the message says where the target sessions were looked for."""


_ADVISORY_KEYS = ("family", "case", "text", "repro")


@dataclass(frozen=True)
class Advisory:
    """A property a correct adapter need not meet, seen on one target: never a red, but shown with its repro line so
    that whoever relies on the property can check it."""

    target: str
    family: str
    nodeid: str
    text: str
    repro: str
    anchor: str
    detail: str = ""
    """The whole message where it says more than ``text`` (a list of findings, a diff), which a report folds."""

    @property
    def case(self) -> tuple[str, str]:
        """The case file and test function of the advisory's node id: the case row it belongs to."""
        return _module_and_function(self.nodeid)


@dataclass(frozen=True)
class CaseResult:
    """One test id's verdict on one target; ``function`` groups the parametrized ids of one test function."""

    module: str
    function: str
    nodeid: str
    status: str
    failure: Failure | None = None
    reason: str | None = None
    """The skip message of a case whose role the subject's declaration leaves out (status ``undeclared``)."""


@dataclass(frozen=True)
class Subject:
    """The subject a session ran, as its summary names it: a dotted module, a ``.py`` path, or a ``.toml``
    declaration file. ``label`` names a declaration by its framework: every declaration is called
    ``megatron-conformance.toml``, so its file name tells none apart (it takes no part in which matrix a session is
    in: that is the spec's)."""

    spec: str
    kind: str
    label: str | None = field(default=None, compare=False)

    @property
    def short(self) -> str:
        """What fits in a column header (the full spec heads the matrix): a declaration's label, e.g.
        ``modernrl.backends.megatron_utils (megatron-conformance.toml)``, else the file or module name."""
        return self.label or Path(self.spec).name or self.spec


@dataclass
class TargetRun:
    """What one target session left behind: its summary, per-test verdicts, advisories, and anything odd about the
    run; ``target`` is its matrix entry, when the matrix defines it."""

    session: str
    summary: SessionSummary | None
    results: list[CaseResult]
    notes: list[str]
    advisories: list[Advisory] = field(default_factory=list)
    target: Target | None = None
    target_session: str = ""
    """The target's session name; ``session`` adds the subject's label where one session checked several subjects
    (``megatron-0.15 (modernrl.backends.megatron_utils (megatron-conformance.toml))``), so that each column and
    anchor is its own."""
    subject_name: str = ""
    """The subject's label in a session of several subjects (:func:`subject_labels`); empty in a session of one."""

    def __post_init__(self) -> None:
        self.target_session = self.target_session or self.session

    @property
    def ran(self) -> bool:
        """Whether the session left anything readable: a target whose install failed left nothing."""
        return self.summary is not None or bool(self.results)

    @property
    def subject(self) -> Subject | None:
        """The subject the session recorded; summaries written before declarations existed name only modules."""
        if self.summary is None or not self.summary.subject:
            return None
        spec, kind = self.summary.subject, self.summary.subject_kind
        label = self.summary.subject_label or (_declaration_label(spec) if kind == "declaration" else None)
        return Subject(spec, kind, label)

    @property
    def selection(self) -> list[str]:
        """The pytest arguments that narrowed the run; empty when the whole case set ran."""
        return [str(argument) for argument in (self.summary.selection if self.summary else None) or ()]

    @property
    def pinned(self) -> bool:
        """Whether the column shows the matrix's pins: the session recorded no installed versions."""
        return self.target is not None and not (self.summary and self.summary.installed)

    def version(self, name: str) -> str:
        """The installed version of ``name`` as the session recorded it, else the matrix's pin (a specifier, so it
        cannot pass for an installed version); ``?`` only for a target the matrix does not define."""
        recorded = self.summary.installed.get(name) if self.summary else None
        if recorded:
            return str(recorded)
        return _pins(self.target)[name] if self.target else "?"


def _declaration_label(spec: str) -> str | None:
    """The label of the declaration at ``spec`` where a summary written before labels were recorded names one that
    is still readable here; ``None`` otherwise."""
    try:
        return read_declaration_file(spec).label
    except DeclarationFileError:
        return None


def _pins(target: Target) -> dict[str, str]:
    """What the matrix pins for each of :data:`INSTALLED`; a Megatron without a version is named by its source."""
    source = target.megatron
    return {
        "megatron-core": str(source.version) if source.version else f"{source.kind} {Path(source.location).name}",
        "torch": str(target.torch),
        "numpy": str(target.numpy) if target.numpy is not None else "unpinned",
        "python": target.python,
    }


def part_text(status: str, count: int) -> str:
    """A status and its count as a cell lists them; a role not declared ran nothing, so it has no count."""
    return WORDS[status] if status == "undeclared" else f"{count} {WORDS[status]}"


def advisory_text(count: int) -> str:
    """The advisory marker of a cell, in both renderings."""
    return f"{count} {'advisory' if count == 1 else 'advisories'}"


@dataclass
class Cell:
    """The verdicts and advisories of one row on one target."""

    results: list[CaseResult] = field(default_factory=list)
    advisories: list[Advisory] = field(default_factory=list)

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
        """The worst status present (advisories never change it); ``none`` when the target ran nothing of this row."""
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


@dataclass(frozen=True)
class Undeclared:
    """A family the subject's declaration leaves out, with the plugin's message and the targets that said so."""

    family: str
    message: str
    sessions: tuple[str, ...]


@dataclass
class SubjectMatrix:
    """The matrix of one subject (``None``: sessions that recorded none): its targets in version order, every target
    that did not run among them, rows (total, then each family followed by its cases), and what the report calls the
    subject (:func:`subject_labels`)."""

    subject: Subject | None
    targets: list[TargetRun]
    rows: list[Row]
    label: str = NO_SUBJECT

    @property
    def runs(self) -> list[TargetRun]:
        """The targets where this subject ran."""
        return [run for run in self.targets if run.ran]

    @property
    def red(self) -> bool:
        """Whether a red is among its cases (the total row holds them all): its folded table of every case opens."""
        return any(cell.failures for cell in self.rows[0].cells.values())

    @property
    def not_declared(self) -> list[Undeclared]:
        """Each family left out by the declaration and each message saying so, once, with the targets it came from."""
        found: dict[tuple[str, str], list[str]] = {}
        for row in self.rows:
            if row.module and row.function is None:
                for session, cell in row.cells.items():
                    for reason in dict.fromkeys(r.reason for r in cell.results if r.reason is not None):
                        found.setdefault((row.label, reason), []).append(session)
        return [Undeclared(family, message, tuple(sessions)) for (family, message), sessions in found.items()]


@dataclass
class ResultGrid:
    """The whole report: every target in version order, and one matrix per subject they ran."""

    targets: list[TargetRun]
    matrices: list[SubjectMatrix]
    left_out: list[str] = field(default_factory=list)
    """Target sessions found under the reports folder and left out because the run named other targets."""

    @property
    def failures(self) -> list[Failure]:
        """Every red, target by target, in row order; a cell's failures are therefore consecutive."""
        return [r.failure for run in self.targets for r in run.results if r.failure]

    @property
    def advisories(self) -> list[Advisory]:
        """Every advisory, target by target, in row order; a cell's advisories are therefore consecutive."""
        return [advisory for run in self.targets for advisory in run.advisories]

    @property
    def recorded(self) -> list[SubjectMatrix]:
        """The matrices of subjects a session recorded (sessions that recorded none share one more)."""
        return [matrix for matrix in self.matrices if matrix.subject is not None]

    @property
    def several(self) -> bool:
        """Whether the sessions ran more than one subject: the report then compares them and names each by label."""
        return len(self.recorded) > 1

    @property
    def target_sessions(self) -> list[str]:
        """Each target once, in version order (a session of several subjects is one target)."""
        return list(dict.fromkeys(run.target_session for run in self.targets))

    @property
    def subjects_on(self) -> dict[str, list[str]]:
        """The labels of the subjects each target checked (none in a report of one subject)."""
        found: dict[str, list[str]] = {}
        for run in self.targets:
            found.setdefault(run.target_session, []).extend([run.subject_name] if run.subject_name else [])
        return found


def natural_key(name: str) -> list[Any]:
    """Sort key under which megatron-0.9 comes before megatron-0.13."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


_SUBJECT_FOLDER = re.compile(r"^\d+-")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _module_and_function(nodeid: str) -> tuple[str, str]:
    """The case file and test function (classes included, parameters left out) of a pytest node id."""
    module, _, rest = nodeid.partition("::")
    return module, rest.split("[", 1)[0]


def _undeclared_reason(case: JUnitCase) -> str | None:
    """The skip message of a case whose role the subject's declaration leaves out: a skip that is no verdict on the
    subject, unlike one for want of hardware."""
    if case.verdict != "skipped" or case.detail is None:
        return None
    message = case.detail.get("message") or ""
    return message if is_not_declared(message) else None


def _case_results(
    cases: Iterable[JUnitCase], session: str, environment: Mapping[str, str], target_session: str
) -> list[CaseResult]:
    """The JUnit cases of one session, sorted in row order, failures numbered for their anchors."""
    pending = sorted(
        ((case.module, case.function if case.name else _COLLECTION, case.nodeid, case) for case in cases),
        key=lambda item: item[:3],
    )
    results, numbers = [], itertools.count(1)
    for module, function, nodeid, case in pending:
        failure = None
        if case.verdict == "failed" and case.detail is not None:
            anchor = f"fail-{_slug(session)}-{next(numbers)}"
            failure = parse_failure(case.detail, session, nodeid, environment, anchor, target_session)
        reason = _undeclared_reason(case)
        status = "undeclared" if reason is not None else case.verdict
        results.append(CaseResult(module, function, nodeid, status, failure, reason))
    return results


def _advisories(records: Iterable[dict[str, str]], session: str) -> list[Advisory]:
    """The session's advisories in row order (so a cell's are consecutive), numbered for their anchors."""
    ordered = sorted(records, key=lambda record: (*_module_and_function(record["case"]), record["case"]))
    return [
        Advisory(session, *(a[k] for k in _ADVISORY_KEYS), f"adv-{_slug(session)}-{number}", a.get("detail", ""))
        for number, a in enumerate(ordered, 1)
    ]


def load_target(
    directory: Path, target: Target | None = None, target_session: str = "", subject_name: str = ""
) -> TargetRun:
    """One target session folder, with its matrix entry when the matrix defines it; a missing or unreadable file
    becomes a note, not an exception. ``target_session`` names the target of a subject's folder of a session that
    checked several: the subject's label (``subject_name``, else the folder's own name) then joins it in the column's
    name."""
    session = f"{target_session} ({subject_name or directory.name})" if target_session else directory.name
    notes: list[str] = []
    summary: SessionSummary | None = None
    if not directory.is_dir():
        notes.append("not run: no reports of it here, or its session stopped before pytest (see its log)")
        return TargetRun(session, summary, [], notes, target=target)
    junit_path = directory / "junit.xml"
    try:
        summary = read_summary(directory)
    except SummaryError as err:
        notes.append(f"{SUMMARY_FILE} is unreadable ({err}); installed versions unknown")
    except FileNotFoundError:
        notes.append(f"no {SUMMARY_FILE}: the session stopped before pytest finished; installed versions unknown")
    except OSError as err:
        notes.append(f"{SUMMARY_FILE} is unreadable ({err.strerror or err}); installed versions unknown")
    recorded = summary or SessionSummary()
    results: list[CaseResult] = []
    if junit_path.is_file():
        try:
            environment = repro_environment(recorded.subject, recorded.matrix)
            results = _case_results(read_cases(junit_path), session, environment, target_session or session)
        except ParseError as err:
            notes.append(f"junit.xml is unreadable ({err}); no verdicts")
    else:
        notes.append("no junit.xml: no verdicts (did the install fail? see the session's log)")
    if recorded.exit_status not in (0, None) and not any(r.failure for r in results):
        notes.append(f"pytest exited with status {recorded.exit_status} without a failing test: see the session's log")
    notes += [
        f"the gate's own error, not a verdict: {error['case']}: {error['text']}" for error in recorded.gate_errors
    ]
    notes += [f"stale expected failure: {prefix!r} matches no test" for prefix in recorded.stale_expected_failures]
    notes += [f"waived by the subject's declaration: {waiver_text(w)}" for w in recorded.waivers]
    notes += [f"did not run: {name}: {why}" for name, why in recorded.not_run.items() if not why.startswith("blocked")]
    if recorded.family_seconds:
        notes.append(time_note(recorded))
    advisories = _advisories(recorded.advisories, session)
    return TargetRun(session, summary, results, notes, advisories, target, target_session, subject_name)


def waiver_text(waiver: Mapping[str, str]) -> str:
    """``kind name: detail (allowed by 'pattern')``: the detail (an ``env-read``'s file and line) where recorded."""
    detail = f": {waiver['detail']}" if waiver.get("detail") else ""
    return f"{waiver['kind']} {waiver['name']}{detail} (allowed by {waiver['allowed_by']!r})"


def time_note(summary: SessionSummary) -> str:
    """Where the session's pytest time went: seconds per family (setup, call and teardown of its cases, summed over
    workers), then the session's wall time, which also holds start-up and collection."""
    families = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in summary.family_seconds.items())
    return f"time per family: {families}; pytest wall time {summary.wall_time_s:.1f} s"


def _contract_name(module: str, results: Iterable[CaseResult]) -> str | None:
    """The contract of a case module: its family in the table, else the one its reds name in their red section."""
    family = family_of_case(module)
    if family is not None:
        return family.name
    return next((r.failure.contract for r in results if r.module == module and r.failure and r.failure.contract), None)


def _cells(
    targets: list[TargetRun], keep: Callable[[CaseResult], bool], advise: Callable[[Advisory], bool]
) -> dict[str, Cell]:
    return {
        run.session: Cell([r for r in run.results if keep(r)], [a for a in run.advisories if advise(a)])
        for run in targets
    }


def _rows(targets: list[TargetRun]) -> list[Row]:
    """Rows for the targets' results: the total, then per case module its family row and one row per function; an
    advisory sits in the total, in its family's row and in its case's row."""
    rows = [Row("", None, "all cases", _cells(targets, lambda r: True, lambda a: True))]
    results = [r for run in targets for r in run.results]
    for module in sorted({r.module for r in results}):
        label = _contract_name(module, results) or module
        cells = _cells(targets, lambda r, m=module: r.module == m, lambda a, f=label: a.family == f)
        rows.append(Row(module, None, label, cells))
        for function in sorted({r.function for r in results if r.module == module}):
            case = (module, function)
            cells = _cells(targets, lambda r, c=case: (r.module, r.function) == c, lambda a, c=case: a.case == c)
            rows.append(Row(module, function, function, cells))
    return rows


def subject_labels(subjects: Sequence[Subject | None]) -> dict[Subject | None, str]:
    """What the report calls each subject, ``subjects`` in the run's order: its declaration's ``[subject] label``
    where given, else its recorded label (the adapter package and the file below the source root), else its file or
    module name, never a folder name such as ``2-megatron-conformance``; the position in the run is added only where
    two subjects would otherwise share a name."""
    names = {subject: subject.short if subject else NO_SUBJECT for subject in subjects}
    counts = Counter(names.values())
    return {
        subject: names[subject] if counts[names[subject]] == 1 else f"{names[subject]} #{position}"
        for position, subject in enumerate(subjects, 1)
    }


def _matrices(targets: list[TargetRun], labels: Mapping[Subject | None, str]) -> list[SubjectMatrix]:
    """One matrix per subject, in the order the targets first ran it, so that no verdict of one subject reads as
    another's; sessions that recorded no subject share one. A target that did not run has no subject: it is a column
    of every matrix."""
    matrices = []
    for subject, label in labels.items():
        members = [run for run in targets if not run.ran or run.subject == subject]
        matrices.append(SubjectMatrix(subject, members, _rows(members), label))
    return matrices


def subject_folders(folder: Path) -> list[Path]:
    """The subjects' folders of a target session that checked several (``1-<name>``, ``2-<name>``, ...), in order;
    none for a session of one subject, whose files lie in ``folder`` itself."""
    if (folder / "junit.xml").is_file() or (folder / SUMMARY_FILE).is_file():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and _SUBJECT_FOLDER.match(p.name)] if folder.is_dir() else []
    return sorted(found, key=lambda path: natural_key(path.name))


def _is_target_folder(folder: Path, expected: Mapping[str, Target]) -> bool:
    """A target session's folder: the gate's ``summary.json``, or a JUnit file of an expected target or of the gate's
    cases (a session cut off before its summary), or subjects' folders holding those. A framework's own
    ``reports/`` may hold other tools' JUnit files."""
    if any(_is_target_folder(sub, expected) for sub in subject_folders(folder)):
        return True
    if not folder.is_dir() or (folder / SUMMARY_FILE).is_file():
        return folder.is_dir()
    junit = folder / "junit.xml"
    if not junit.is_file():
        return False
    if folder.name in expected:
        return True
    try:
        return any(case.nodeid.startswith("cases/") for case in read_cases(junit))
    except (OSError, ParseError):
        return False


def collect(reports: Path, expected: Mapping[str, Target] | None = None, only: bool = False) -> ResultGrid:
    """The grid of every target session under ``reports``, plus a column for each ``expected`` one that left none;
    with ``only``, of the ``expected`` ones alone (the targets a run named), whatever else ``reports`` holds.

    A target whose install failed leaves no folder (and in CI no artifact); passing the matrix's targets (session to
    entry) keeps it in the report as a column that was not run, with its pins. Contract names come from the families
    table.
    """
    expected = expected or {}
    found = {p.name for p in (reports.iterdir() if reports.is_dir() else ()) if _is_target_folder(p, expected)}
    left_out = sorted(found - set(expected), key=natural_key) if only else []
    if only:
        found &= set(expected)
    if not found:
        named = f" of {', '.join(expected)}" if only else ""
        raise ReportError(
            f"no target session{named} in {reports}: expected <session>/junit.xml or <session>/{SUMMARY_FILE} there; "
            f"run a target first ({launcher()} -s megatron-0.15) or download the gate's artifacts into it"
        )
    sessions = sorted(found | set(expected), key=natural_key)
    recorded = {folder: _recorded(folder) for name in sessions for folder in _session_folders(reports, name)}
    # Every subject the sessions ran, in the order they first ran it (a session's folders in their order).
    labels = subject_labels(list(dict.fromkeys(subject for ran, subject in recorded.values() if ran)) or [None])
    named = {folder: labels.get(subject) if ran else None for folder, (ran, subject) in recorded.items()}
    targets = _load_all(reports, sessions, expected, named)
    return ResultGrid(targets, _matrices(targets, labels), left_out)


def _session_folders(reports: Path, session: str) -> list[Path]:
    """The folders of one target session: each subject's, in a session of several, else its own."""
    return subject_folders(reports / session) or [reports / session]


def _recorded(folder: Path) -> tuple[bool, Subject | None]:
    """Whether a session folder holds anything readable (as :attr:`TargetRun.ran`), and the subject its summary
    names; read from the summary alone, and from the JUnit file only where there is no summary."""
    try:
        summary = read_summary(folder)
    except (SummaryError, OSError):
        summary = None
    if summary is not None:
        return True, TargetRun(folder.name, summary, [], []).subject
    try:
        return any(True for _ in read_cases(folder / "junit.xml")), None
    except (OSError, ParseError):
        return False, None


def _load_all(
    reports: Path, sessions: list[str], expected: Mapping[str, Target], labels: Mapping[Path, str | None]
) -> list[TargetRun]:
    """Every session's folder (each subject's, in a session of several) read once, the subjects' folders named by
    the label of the subject each ran."""
    targets = []
    for name in sessions:
        folders = subject_folders(reports / name)
        named: set[str] = set()
        for folder in folders:
            label = labels[folder]
            if label in named:  # one subject named twice in a run: its folders tell the two sessions apart
                label = f"{label} ({folder.name})"
            named.add(label or "")
            targets.append(load_target(folder, expected.get(name), name, label or ""))
        if not folders:
            targets.append(load_target(reports / name, expected.get(name)))
    return targets


def headline(grid: ResultGrid) -> str:
    """One line: how many targets ran, and which are red; with several subjects, how many, and each one's reds with
    the targets they are on (a reader who stops at the first matrix must not take it for all of them). "7 targets,
    no failure" with one of them not run would pass a target nothing checked for green."""
    sessions = {run.target_session for run in grid.targets}
    # A target of several subjects ran only where every subject's session left something readable.
    ran = len(sessions - {run.target_session for run in grid.targets if not run.ran})
    total = len(sessions)
    count = f"{total} target{'s' if total != 1 else ''}" if ran == total else f"{ran} of {total} targets ran"
    if grid.several:
        return f"{count} · {len(grid.recorded)} subjects · {_reds_by_subject(grid)}."
    red = [run for run in grid.targets if any(r.failure for r in run.results)]
    names = ", ".join(f"{run.session} ({sum(1 for r in run.results if r.failure)})" for run in red)
    text = f"{count}; failures on {names}." if red else f"{count}, no failure."
    if len(grid.matrices) > 1:
        text += " Some sessions recorded no subject: their verdicts have a matrix of their own."
    return text


def _reds_by_subject(grid: ResultGrid) -> str:
    """``5 reds: legacyrl 3 (megatron-0.13, megatron-0.16), kestrel 2 (megatron-0.16)``, or ``no red``."""
    parts, total = [], 0
    for matrix in grid.matrices:
        red = {run.target_session: sum(1 for r in run.results if r.failure) for run in matrix.runs}
        count = sum(red.values())
        total += count
        if count:
            parts.append(f"{matrix.label} {count} ({', '.join(t for t, n in red.items() if n)})")
    return f"{total} red{'s' if total != 1 else ''}: {', '.join(parts)}" if total else "no red"
