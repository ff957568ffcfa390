"""The work measure behind the linear-cost property (``harness.contracts.work``): exact, repeatable, blind to the
tracer's own bookkeeping, and able to see quadratic work both in bytecode and inside builtins."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable
from functools import partial
from itertools import repeat

from harness.contracts.work import Work, measure_work, settled_heap


def idle(n: int) -> None:
    for _ in repeat(None, n):
        pass


def copies_per_item(n: int) -> None:
    """Linear in Python calls and bytecode; the list copy inside each step makes it quadratic in bytes."""
    current: list[None] = []
    for _ in repeat(None, n):
        current = [*current, None]


def resums_per_item(n: int) -> None:
    """Quadratic in bytecode: a generator walks the prefix for every item."""
    sizes = [8] * n
    for i in range(n):
        sum(size for size in sizes[:i])


def appends(n: int) -> None:
    current: list[None] = []
    for _ in repeat(None, n):
        current.append(None)


def settled(call: Callable[[], None]) -> Work:
    """The work of ``call()`` once the first traced runs have specialised its code."""
    for _ in range(2):
        measure_work(call)
    return measure_work(call)


TRIES = 3
"""tracemalloc counts the allocations of every thread: on an xdist worker, execnet's thread unpickles what the
controller sends (more files, or the shutdown once the queue is empty) whenever it arrives, into whichever measure
is running then (a few hundred bytes, seen once at the end of a CI run). Measures that must agree are taken
again, up to this many times, before a difference counts; a measure that really differs differs every time."""


def agree(*measures: Callable[[], Work]) -> list[Work]:
    """The measures, all taken again while any differs (at most :data:`TRIES` times)."""
    for _ in range(TRIES):
        works = [measure() for measure in measures]
        if all(work == works[0] for work in works):
            break
    return works


def growth(function: Callable[[int], None], n: int) -> tuple[float, float]:
    few, many = settled(lambda: function(n)), measure_work(lambda: function(8 * n))
    return many.instructions / few.instructions, many.allocated_bytes / max(few.allocated_bytes, 1)


def test_counts_repeat_exactly() -> None:
    for function in (idle, copies_per_item, resums_per_item, appends):
        call = partial(function, 100)
        settled_once, again, once_more = agree(
            partial(settled, call), partial(measure_work, call), partial(measure_work, call)
        )
        assert settled_once == again == once_more, function.__name__


def test_the_tracer_itself_allocates_nothing_per_instruction() -> None:
    small, large = settled(partial(idle, 100)), settled(partial(idle, 10_000))
    assert large.instructions > 50 * small.instructions
    # The same fixed cost (the call's own frames): nothing per instruction, which would add 30 000 times over.
    assert abs(large.allocated_bytes - small.allocated_bytes) < 100, "the tracer's bookkeeping leaked into the measure"


def test_linear_work_grows_linearly() -> None:
    instructions, allocated = growth(appends, 200)
    assert 7 < instructions <= 8
    assert allocated <= 8 * 1.5


def test_copies_inside_builtins_show_in_bytes_allocated() -> None:
    instructions, allocated = growth(copies_per_item, 200)
    assert instructions <= 8, "the copy runs no bytecode of its own"
    assert allocated > 30


def test_quadratic_bytecode_shows_in_instructions() -> None:
    instructions, _ = growth(resums_per_item, 40)
    assert instructions > 30


def test_counting_stops_at_the_limit_and_the_call_still_finishes() -> None:
    done: list[int] = []

    def call() -> None:
        resums_per_item(200)
        done.append(1)

    work = measure_work(call, instruction_limit=1000)
    assert not work.complete and work.instructions == 1001
    assert done == [1]


def test_the_process_state_is_restored() -> None:
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        measure_work(lambda: idle(10), instruction_limit=5)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    assert not tracemalloc.is_tracing()
    assert gc.isenabled()


def settled_inside(call: Callable[[], None]) -> Work:
    """:func:`settled` inside a settled heap, which holds what survived the collection frozen."""
    with settled_heap():
        assert gc.get_freeze_count() > 0
        return settled(call)


def test_a_settled_heap_changes_no_count_and_is_given_back() -> None:
    for function in (copies_per_item, resums_per_item, appends):
        call = partial(function, 100)
        outside, inside = agree(partial(settled, call), partial(settled_inside, call))
        assert inside == outside, function.__name__
    assert gc.get_freeze_count() == 0
