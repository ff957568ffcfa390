"""Long runs say where they stand: done out of the total and an estimate of the time left, from any thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from harness.formats.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_durations_are_as_precise_as_a_glance_needs() -> None:
    assert [duration(s) for s in (0.4, 45, 89, 90, 754, 3600, 3929)] == [
        "0 s",
        "45 s",
        "89 s",
        "2 min",
        "13 min",
        "1 h 00 min",
        "1 h 05 min",
    ]


def test_the_time_left_is_the_mean_step_so_far_times_the_steps_left() -> None:
    clock = Clock()
    steps = Progress(4, clock)
    assert steps.status() == "[0/4, 0 s so far]"
    clock.now += 30
    assert steps.advance() == "[1/4, 30 s so far, about 2 min left]"
    clock.now += 90
    assert steps.advance() == "[2/4, 2 min so far, about 2 min left]"
    clock.now += 10
    steps.advance()
    assert steps.advance() == "[4/4, 2 min so far, about 0 s left]"


def test_steps_finished_on_several_threads_are_each_counted_once() -> None:
    steps = Progress(200, Clock())
    with ThreadPoolExecutor(max_workers=8) as pool:
        lines = list(pool.map(lambda _: steps.advance(), range(200)))
    assert steps.done == 200
    assert sorted(int(line[1:].split("/")[0]) for line in lines) == list(range(1, 201))
