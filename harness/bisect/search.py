"""The binary search over a line of builds whose first is green and whose last is red.

The search knows nothing of nox or Megatron: a judge says of one build whether the cases are green, red, or could
not be run there (a build that does not install, a gate error), and the search narrows the line around the first red.
A build that could not be run is stepped around, the nearest runnable build to the middle taken instead; where every
build left between the two ends is of that kind, the search says so rather than guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.targets.index_builds import Build

GREEN, RED, SKIPPED = "green", "red", "skipped"


@dataclass(frozen=True)
class StepVerdict:
    """What the cases said on one build: ``red`` names the red cases; ``reason`` why a skipped build was not run;
    ``details`` what the report needs of a red (symbols, call sites), as plain data."""

    status: str
    red: tuple[str, ...] = ()
    reason: str = ""
    seconds: float = 0.0
    cached: bool = False
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One build judged during the search, numbered from 1."""

    number: int
    build: Build
    verdict: StepVerdict


ADJACENT = "adjacent"
BOUNDED = "bounded"
UNTESTABLE = "untestable"
STOPS = {
    ADJACENT: "the two builds are adjacent on the index",
    BOUNDED: "the step bound was reached",
    UNTESTABLE: "every build left between them could not be run",
}


@dataclass(frozen=True)
class Outcome:
    """Where the search stopped: the last green and first red builds known, the builds still between them (none when
    they are adjacent), every step, and why it stopped (a key of :data:`STOPS`)."""

    last_green: Build
    first_red: Build
    between: tuple[Build, ...]
    steps: tuple[Step, ...]
    stopped: str


Judge = Callable[[Build], StepVerdict]


def search(
    line: list[Build],
    judge: Judge,
    max_steps: int | None = None,
    progress: Callable[[Step], None] = lambda step: None,
    first_number: int = 1,
) -> Outcome:
    """Narrow ``line`` (first build green, last red, as the caller checked) to the first red build."""
    if len(line) < 2:
        raise ValueError("a search needs a green and a red end")
    low, high = 0, len(line) - 1
    skipped: set[int] = set()
    steps: list[Step] = []
    stopped = ADJACENT
    while high - low > 1:
        if max_steps is not None and len(steps) >= max_steps:
            stopped = BOUNDED
            break
        middle = _runnable_middle(low, high, skipped)
        if middle is None:
            stopped = UNTESTABLE
            break
        step = Step(first_number + len(steps), line[middle], judge(line[middle]))
        steps.append(step)
        progress(step)
        if step.verdict.status == SKIPPED:
            skipped.add(middle)
        elif step.verdict.status == RED:
            high = middle
        else:
            low = middle
    between = tuple(line[i] for i in range(low + 1, high))
    return Outcome(line[low], line[high], between, tuple(steps), stopped)


def _runnable_middle(low: int, high: int, skipped: set[int]) -> int | None:
    """The index strictly between ``low`` and ``high`` nearest their middle that was not skipped (the lower on a
    tie), ``None`` when there is none."""
    runnable = [i for i in range(low + 1, high) if i not in skipped]
    if not runnable:
        return None
    middle = (low + high) / 2
    return min(runnable, key=lambda i: (abs(i - middle), i))


def steps_needed(builds_between: int) -> int:
    """Steps a search of ``builds_between`` builds takes when none is skipped: what the progress line counts to."""
    steps = 0
    while builds_between > 0:
        builds_between //= 2
        steps += 1
    return steps
