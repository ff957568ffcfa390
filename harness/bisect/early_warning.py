"""Early warning: what the newest megatron-core on the index, per Python the matrix uses, turns red that the newest
matrix release keeps green, before that build becomes a release the framework adopts.

"Newest" depends on the interpreter: under Python 3.11 the index offers nothing newer than 0.16's line, while 0.17
on require 3.12; it is asked per Python (:func:`harness.targets.index_builds.newest_for`), release candidates and
nightly builds included. The comparison is by case: red on the candidate and passed on the release. Its section
shows both builds with their upload dates, the cases that turned red, and the source diff of the Megatron symbols
behind them between the release and the candidate, folded (:mod:`harness.bisect.report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.bisect.build_source import BuildSourceError, build_source
from harness.bisect.gate_step import red_details
from harness.bisect.report import Section
from harness.bisect.symbol_diff import diffs_behind
from harness.formats.junit import JUnitCase
from harness.targets.index_builds import Build, newest_for

STEM = "early-warning"


@dataclass(frozen=True)
class Latest:
    """The newest build on the index that installs on ``python`` (``None``: none does)."""

    python: str
    build: Build | None


def latest_per_python(builds: list[Build], pythons: list[str]) -> list[Latest]:
    return [Latest(python, newest_for(builds, python)) for python in sorted(set(pythons))]


def turned_red(candidate: list[JUnitCase], release: list[JUnitCase]) -> list[JUnitCase]:
    """The candidate's red cases that passed on the release."""
    passed = {case.nodeid for case in release if case.verdict == "passed"}
    return [case for case in candidate if case.verdict == "failed" and case.nodeid in passed]


def warning_section(
    python: str,
    candidate: Build,
    release: Build,
    candidate_cases: list[JUnitCase],
    release_cases: list[JUnitCase],
    cache: Path | None = None,
) -> Section:
    """The comparison of one Python's newest build with the newest matrix release."""
    turned = turned_red(candidate_cases, release_cases)
    red_anyway = sum(1 for c in candidate_cases if c.verdict == "failed") - len(turned)
    notes = []
    if candidate.version == release.version:
        notes.append(f"megatron-core {candidate.version} is the newest matrix release itself: nothing newer installs")
    elif candidate.parsed < release.parsed:
        notes.append(
            f"nothing on the index newer than {candidate.version} installs on Python {python}: the comparison shows "
            f"what {release.version} fixed, not what is coming"
        )
    if red_anyway:
        notes.append(f"{red_anyway} more cases are red on both, or did not run on the release")
    diffs: tuple = ()
    details = red_details(turned)
    if details["symbols"] or details["call_sites"]:
        try:
            sources = [(b.version, build_source(b, cache)) for b in (release, candidate)]
            diffs = tuple(diffs_behind(details["symbols"], details["call_sites"], sources[0], sources[1]))
        except BuildSourceError as err:
            notes.append(f"no source diff: {err}")
    verdict = (
        f"{len(turned)} cases red on it and green on {release.version}"
        if turned
        else f"nothing turned red against {release.version}"
    )
    headline = (
        f"Python {python}: megatron-core {candidate.version} (uploaded {candidate.date()}), the newest build on the "
        f"index for this Python, against the newest matrix release {release.version} (uploaded {release.date()}): "
        f"{verdict}."
    )
    return Section(
        f"Early warning on Python {python}: megatron-core {candidate.version} against {release.version}",
        headline,
        "Turned red",
        tuple(case.nodeid for case in turned),
        notes=tuple(notes),
        diffs=diffs,
    )


def no_build_section(python: str) -> Section:
    return Section(
        f"Early warning on Python {python}",
        f"Python {python}: no build of megatron-core on the index installs on it.",
        "Turned red",
        (),
    )
