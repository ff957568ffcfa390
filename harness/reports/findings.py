"""The report's findings in one column per target, as the summary below them: is the chunked patch still needed
there, and what does it leave unbounded?

A session records its findings as sentences (``summary.json``'s ``findings``, worded by
:func:`harness.contracts.step_memory.finding` for the real step and by the equivalence case for the largest-buffer
population). Listed one per line, seven targets' worth ran to a screen before the first verdict; read back into their
figures (both peaks, the reductions the subject leaves alone) they fit a few short rows. A finding of another shape
(an upstream fallback, a measurement that could not be made) and a blocker are kept whole under ``other``: nothing a
session recorded is dropped for not fitting a row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.formats.byte_sizes import size
from harness.formats.scale_findings import cell_text, row_label
from harness.reports.results import TargetRun

_CUDA = r"(?:on CUDA \((?P<placement>[^)]*)\): )?"
_STEP = re.compile(
    r"megatron-core \S+, real step \((?P<configuration>[^()]*)\): peak (?P<upstream>\d+) bytes under upstream, "
    r"(?P<subject>\d+) with the subject; (?:coalesced reductions the subject does not bound: (?P<unbounded>.+?)|every "
    r"coalesced reduction that ran is bounded by the subject)(?:; not exercised here, and not replaced by the subject: "
    r"(?P<idle>.+))?"
)
_UNBOUNDED = re.compile(r"(\w+) \((\d+) bytes in one buffer\)")
_POPULATION = r"the largest-buffer population \((?P<size>\S+ \S+) of [^()]*\)"
_COALESCED = re.compile(
    rf"{_CUDA}megatron-core \S+, {_POPULATION}: upstream "
    r"(?:coalesces all of it into one buffer|holds \d+ bytes of it at once) \(peak (?P<upstream>\d+) bytes\), the "
    r"subject's call peaks at (?P<subject>\d+)"
)
_ON_ITS_OWN = re.compile(
    rf"{_CUDA}megatron-core \S+ chunks {_POPULATION} on its own \(peak (?P<upstream>\d+) bytes, within the "
    r"\d+-byte bound\)"
)

STEP = "real step"
NOT_KNOWN = ("not run", "not measured")
"""The verdicts of a target that says nothing about the patch."""
HEAD = "finding (peaks: upstream → with the subject)"
NEEDED = "patch still needed?"
UNBOUNDED = "coalesced reductions the subject does not bound"
IDLE = "not exercised here, and not replaced by the subject"
"""The first column of the findings table, as both renderings head it and label its rows."""


@dataclass(frozen=True)
class Peak:
    """One measurement of both sides: ``needed`` when upstream holds more than the subject (a real step) or more than
    the memory bound (the largest-buffer population)."""

    what: str
    upstream: int
    subject: int | None
    needed: bool


@dataclass
class TargetFindings:
    """One target's row: its peaks, the coalesced reductions the subject leaves unbounded (with the bytes each held),
    those no configuration exercised, and every finding or blocker not read into those."""

    session: str
    ran: bool
    target: str = ""
    """The target's session (``session`` adds the subject in a session of several)."""
    subject: str = ""
    """The subject's label in a report of several subjects; empty in a report of one."""
    peaks: list[Peak] = field(default_factory=list)
    unbounded: dict[str, int] = field(default_factory=dict)
    not_exercised: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    scale: dict[str, str] = field(default_factory=dict)
    """Each declared model's scale verdict, by its row's label (``at scale: llama-70b (TP 8 + SP)``)."""
    steps: int = 0
    """How many real-step findings were read: none means nothing is known about unbounded reductions."""

    def peak(self, what: str) -> Peak | None:
        """This target's measurement called ``what``, if it made one."""
        return next((peak for peak in self.peaks if peak.what == what), None)

    @property
    def verdict(self) -> str:
        """``needed`` when some measurement says upstream holds more than the subject or the bound, ``not needed``
        when every one says it does not, else why nothing is known."""
        if not self.ran:
            return "not run"
        if not self.peaks:
            return "not measured"
        return "needed" if any(peak.needed for peak in self.peaks) else "not needed"


def peak_text(peak: Peak) -> str:
    """A measurement as its cell shows it: ``896 B → 4 B`` (upstream's peak, then the subject's), or upstream's
    peak within the bound where it needs no patch."""
    if peak.subject is None:
        return f"{size(peak.upstream)}, within the bound"
    return f"{size(peak.upstream)} → {size(peak.subject)}"


def peak_cell(what: str) -> Callable[[TargetFindings], str]:
    """What a target's cell of the measurement ``what`` says: its peaks, or ``—`` where it made none."""

    def text(row: TargetFindings) -> str:
        peak = row.peak(what)
        return peak_text(peak) if peak else "—"

    return text


def _read(row: TargetFindings, text: str, idle: list[set[str]]) -> bool:
    """Read one finding into ``row``; ``False`` when it is of no shape read here."""
    step = _STEP.fullmatch(text)
    if step:
        upstream, subject = int(step["upstream"]), int(step["subject"])
        row.peaks.append(Peak(f"{STEP} ({step['configuration']})", upstream, subject, upstream > subject))
        for name, nbytes in _UNBOUNDED.findall(step["unbounded"] or ""):
            row.unbounded[name] = max(row.unbounded.get(name, 0), int(nbytes))
        idle.append(set(step["idle"].split(", ")) if step["idle"] else set())
        row.steps += 1
        return True
    for pattern, needed in ((_COALESCED, True), (_ON_ITS_OWN, False)):
        found = pattern.fullmatch(text)
        if found:
            where = f", CUDA {found['placement']}" if found["placement"] else ""
            subject = int(found["subject"]) if needed else None
            what = f"largest-buffer population, {found['size']}{where}"
            row.peaks.append(Peak(what, int(found["upstream"]), subject, needed))
            return True
    return False


def target_findings(run: TargetRun) -> TargetFindings:
    """One target's row; a reduction counts as not exercised when no real-step configuration of the target
    exercised it."""
    row = TargetFindings(run.session, run.ran, run.target_session, run.subject_name)
    summary = run.summary
    if summary is None:
        return row
    row.other += [f"blocked: {line}" for line in summary.blocked]
    idle: list[set[str]] = []
    for record in summary.findings:
        scale_row = row_label(record["text"]) if record["family"] == "scale" else None
        if scale_row:
            row.scale[scale_row] = cell_text(record["text"])
            if "not measured" in row.scale[scale_row]:
                row.other.append(f"scale: {record['text']}")
        elif record["family"] != "equivalence" or not _read(row, record["text"], idle):
            row.other.append(f"{record['family']}: {record['text']}")
    if idle:
        common = set.intersection(*idle) - set(row.unbounded)
        row.not_exercised = sorted(common)
    return row


@dataclass
class FindingsTable:
    """Every target's findings, in column order, and the measurements any of them made, as rows. A target of several
    subjects is one column: what its subjects found alike is said once, what differs is said per subject."""

    targets: list[TargetFindings]

    @property
    def columns(self) -> list[tuple[str, list[TargetFindings]]]:
        """Each target once, in version order, with its subjects' rows."""
        found: dict[str, list[TargetFindings]] = {}
        for row in self.targets:
            found.setdefault(row.target or row.session, []).append(row)
        return list(found.items())

    @property
    def subjects_on(self) -> dict[str, list[str]]:
        """The subjects each target checked (one empty name in a report of one subject)."""
        return {target: [row.subject for row in rows] for target, rows in self.columns}

    @property
    def scale_rows(self) -> list[str]:
        """The declared models measured at scale on some target, as row labels, in the order first met."""
        return list(dict.fromkeys(label for row in self.targets for label in row.scale))

    def rows(self, text: Callable[[TargetFindings], str]) -> list[tuple[str, list[str]]]:
        """The cells of one finding, a column each: one row (subject ``""``) where every target's subjects read
        alike, else one row per subject, so that a column stays as narrow as its figures."""
        columns = [[(row.subject, text(row)) for row in rows] for _, rows in self.columns]
        if all(len({value for _, value in column}) == 1 for column in columns):
            return [("", [column[0][1] for column in columns])]
        subjects = list(dict.fromkeys(subject for column in columns for subject, _ in column))
        return [(subject, [dict(column).get(subject, "—") for column in columns]) for subject in subjects]

    @property
    def measurements(self) -> list[str]:
        """What was measured on some target: the real steps' configurations, then the populations, each in the
        order first met."""
        found = list(dict.fromkeys(peak.what for row in self.targets for peak in row.peaks))
        return sorted(found, key=lambda what: not what.startswith(STEP))

    @property
    def other(self) -> list[tuple[str, str, str]]:
        """Every blocker and finding not read into a row, with its target and subject."""
        return [(row.target or row.session, row.subject, text) for row in self.targets for text in row.other]


def findings_table(targets: list[TargetRun]) -> FindingsTable | None:
    """The findings of ``targets``; ``None`` when none of them recorded a finding or a blocker (a report of sessions
    that measured nothing shows no findings)."""
    rows = [target_findings(run) for run in targets]
    return FindingsTable(rows) if any(row.peaks or row.other or row.scale for row in rows) else None
