"""A bisect from two versions to an answer: the builds between them, both ends checked, the search, the diff.

Bad input ends in one line before any search (:class:`BisectError`): a version the index does not have, good not
older than bad, a named case red on good or not red on bad, a bad with no red that good lacks, an end that cannot
be run. Each step prints one progress line as it ends; every verdict goes through the step cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.bisect.build_source import BuildSourceError, build_source
from harness.bisect.search import RED, SKIPPED, STOPS, Outcome, Step, StepVerdict, search, steps_needed
from harness.bisect.step_cache import cached_step, gate_digest, keep_step, step_key, subject_digest
from harness.bisect.symbol_diff import SymbolDiff, diffs_behind
from harness.targets.index_builds import Build, BuildIndexError, default_index, find, index_builds, main_line
from harness.targets.matrix import MEGATRON_DISTRIBUTION

StepRunner = Callable[[Build, list[str]], StepVerdict]
"""Runs the cases of a selection on one build (``["cases"]``: all of them)."""

ALL_CASES = "cases"
"""The selection of every case: what the ends of a search run when no case is named."""


class BisectError(RuntimeError):
    """Bad input or an end the search cannot start from; the message is the one line to print."""


@dataclass(frozen=True)
class Request:
    """What the command line asked: the two ends, the cases (none: the reds of bad that good lacks), a bound on the
    steps, and the index (``None``: pip's)."""

    good: str
    bad: str
    cases: tuple[str, ...] = ()
    max_steps: int | None = None
    index: str | None = None


@dataclass
class Result:
    """A finished bisect: the ends as judged, the cases searched, the search's outcome, the diffs behind the red, and
    what was said along the way."""

    request: Request
    good: Step
    bad: Step
    selection: tuple[str, ...]
    outcome: Outcome
    diffs: list[SymbolDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_bisect(
    request: Request,
    runner: StepRunner,
    subject: str,
    say: Callable[[str], None] = print,
    cache: Path | None = None,
) -> Result:
    started = time.monotonic()
    index_name = request.index or default_index()
    try:
        builds = index_builds(request.index)
        good = find(builds, request.good, index_name)
        bad = find(builds, request.bad, index_name)
        line, patch_releases = main_line(builds, good, bad)
    except BuildIndexError as err:
        raise BisectError(f"bisect: {err}") from None
    notes = [_line_note(line, patch_releases)]
    say(f"bisect: {notes[0]}")
    judge = _cached_judge(runner, subject_digest(subject), gate_digest(), cache)
    ends = list(request.cases) or [ALL_CASES]
    good_step = _end(judge, good, ends, "good", say)
    bad_step = _end(judge, bad, ends, "bad", say)
    selection = _selection(request, good_step, bad_step)
    say(f"bisect: searching for the first build on which {_cases_text(selection)} go red")
    bound = f"at most {request.max_steps}" if request.max_steps else f"about {steps_needed(len(line) - 2)}"

    def progress(step: Step) -> None:
        say(f"bisect step {step.number} ({bound}): {step_text(step)}")
        for note in step.verdict.details.get("notes", []):
            say(f"  {note}")

    outcome = search(line, lambda build: judge(build, list(selection)), request.max_steps, progress)
    notes += [n for step in (good_step, bad_step, *outcome.steps) for n in step.verdict.details.get("notes", [])]
    red_step = next((s for s in (*outcome.steps, bad_step) if s.build == outcome.first_red), bad_step)
    diffs, diff_note = _diffs(outcome, red_step, cache)
    if diff_note:
        notes.append(diff_note)
    result = Result(request, good_step, bad_step, selection, outcome, diffs, list(dict.fromkeys(notes)))
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _cached_judge(runner: StepRunner, subject: str, gate: str, cache: Path | None) -> StepRunner:
    def judge(build: Build, selection: list[str]) -> StepVerdict:
        key = step_key(build, subject, selection, gate)
        kept = cached_step(key, cache)
        if kept is not None:
            return kept
        verdict = runner(build, selection)
        keep_step(key, verdict, cache)
        return verdict

    return judge


def _end(judge: StepRunner, build: Build, selection: list[str], which: str, say: Callable[[str], None]) -> Step:
    step = Step(0, build, judge(build, selection))
    say(f"bisect {which} end: {step_text(step)}")
    for note in step.verdict.details.get("notes", []):
        say(f"  {note}")
    if step.verdict.status == SKIPPED:
        raise BisectError(f"bisect: {which} {build.version} could not be run: {step.verdict.reason}")
    return step


def _selection(request: Request, good: Step, bad: Step) -> tuple[str, ...]:
    if request.cases:
        red_on_good = [c for c in request.cases if _is_red(c, good.verdict)]
        if red_on_good:
            raise BisectError(
                f"bisect: good {good.build.version} is red on {', '.join(red_on_good)}: a search starts from a green "
                "build; name an older good"
            )
        not_red = [c for c in request.cases if not _is_red(c, bad.verdict)]
        if not_red:
            raise BisectError(
                f"bisect: {', '.join(not_red)} is not red on bad {bad.build.version}: nothing to search for"
            )
        return tuple(request.cases)
    if not bad.verdict.red:
        raise BisectError(f"bisect: bad {bad.build.version} is green: nothing to search for")
    new = tuple(c for c in bad.verdict.red if c not in good.verdict.red)
    if not new:
        raise BisectError(
            f"bisect: bad {bad.build.version} has no red that good {good.build.version} lacks: nothing to search for"
        )
    return new


def _is_red(case: str, verdict: StepVerdict) -> bool:
    """Whether ``case`` (a node id, or a prefix of some: a file, a test function without its parameters) is red."""
    return any(red == case or red.startswith((f"{case}::", f"{case}[")) for red in verdict.red)


def _line_note(line: list[Build], patch_releases: list[Build]) -> str:
    nightly = sum(1 for b in line[1:-1] if b.is_nightly)
    others = len(line) - 2 - nightly
    text = (
        f"{len(line) - 2} builds of {MEGATRON_DISTRIBUTION} between {line[0].version} and {line[-1].version} on the "
        f"index: {nightly} nightly builds of main, ordered by upload (their dev numbers are not in build order), and "
        f"{others} release candidates or releases"
    )
    if patch_releases:
        text += f"; left out as releases of a release branch, not main: {', '.join(b.version for b in patch_releases)}"
    return text


def _cases_text(selection: tuple[str, ...]) -> str:
    shown = ", ".join(selection[:3]) + (f" and {len(selection) - 3} more" if len(selection) > 3 else "")
    return f"{len(selection)} case{'s' if len(selection) != 1 else ''} ({shown})"


def step_text(step: Step) -> str:
    verdict = step.verdict
    if verdict.status == SKIPPED:
        said = f"skipped: {verdict.reason}"
    elif verdict.status == RED:
        said = f"red ({len(verdict.red)} case{'s' if len(verdict.red) != 1 else ''})"
    else:
        said = "green"
    timing = "from the cache" if verdict.cached else f"{verdict.seconds:.0f} s"
    return f"{MEGATRON_DISTRIBUTION} {step.build.version} (uploaded {step.build.date()}): {said}, {timing}"


def _diffs(outcome: Outcome, red_step: Step, cache: Path | None) -> tuple[list[SymbolDiff], str]:
    details = red_step.verdict.details
    symbols, call_sites = list(details.get("symbols", [])), list(details.get("call_sites", []))
    if not symbols and not call_sites:
        return [], "the reds name no Megatron symbol or call site: no source diff to show"
    try:
        green_root = build_source(outcome.last_green, cache)
        red_root = build_source(outcome.first_red, cache)
    except BuildSourceError as err:
        return [], f"no source diff: {err}"
    green = (outcome.last_green.version, green_root)
    red = (outcome.first_red.version, red_root)
    return diffs_behind(symbols, call_sites, green, red), ""


def stop_text(outcome: Outcome) -> str:
    """Why the search stopped, with the builds left between the two where there are any."""
    text = STOPS[outcome.stopped]
    if outcome.between:
        shown = ", ".join(b.version for b in outcome.between[:5])
        more = f" and {len(outcome.between) - 5} more" if len(outcome.between) > 5 else ""
        text += f"; {len(outcome.between)} builds still between them: {shown}{more}"
    return text


def parse_request(arguments: list[str]) -> Request:
    """``<good> <bad> [case id ...] [--max-steps N] [--index URL-or-folder]`` read into a :class:`Request`."""
    positional: list[str] = []
    options: dict[str, str] = {}
    words = iter(arguments)
    for word in words:
        if word in ("--max-steps", "--index"):
            value = next(words, None)
            if value is None:
                raise BisectError(f"bisect: {word} needs a value")
            options[word] = value
        elif word.startswith(("--max-steps=", "--index=")):
            name, _, value = word.partition("=")
            options[name] = value
        elif word.startswith("-"):
            raise BisectError(f"bisect: unknown option {word} (known: --max-steps N, --index URL-or-folder)")
        else:
            positional.append(word)
    if len(positional) < 2:
        raise BisectError(f"bisect: name a good and a bad version: {USAGE}")
    steps = options.get("--max-steps")
    if steps is not None and (not steps.isdigit() or int(steps) < 1):
        raise BisectError(f"bisect: --max-steps takes a whole number of at least 1, not {steps!r}")
    good, bad = (version.removeprefix(f"{MEGATRON_DISTRIBUTION}==") for version in positional[:2])
    return Request(good, bad, tuple(positional[2:]), int(steps) if steps else None, options.get("--index"))


USAGE = "-s bisect -- <good> <bad> [case id ...] [--max-steps N] [--index URL-or-folder]"
