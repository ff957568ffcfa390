"""A deterministic measure of the work one call does, for the chunk-splitting family's linear-cost property.

Wall time is not a measure here (shared CI machines make it noise), and neither is the number of Python calls: a
splitter can do quadratic work in a linear number of calls, by copying a list or re-summing a slice per grad inside
C builtins. :func:`measure_work` counts two things while the call runs:

- **instructions**: the bytecode instructions executed in every Python frame the call enters (``sys.settrace`` with
  ``frame.f_trace_opcodes``), generators included: quadratic work done in Python shows here;
- **allocated bytes**: the volume allocated, read from ``tracemalloc`` at every instruction as the peak since the
  previous instruction above the memory then in use. A slice, a list copy or a concatenation allocates in
  proportion to its length, so builtins re-reading a growing sequence show here although they run no bytecode.
  The tracer's own bookkeeping is kept out of it exactly (an idle loop measures 0 bytes); the frame objects that
  tracing materialises (one per Python call) are counted, which is linear in calls.

Both counts are exact and repeatable for the same call on the same inputs once the code has run once traced (the
first traced run specialises code and fills caches); the garbage collector is collected first and paused, so free
lists start empty and no collection lands inside the measure. That full collection walks every object of the process
(torch and Megatron hold millions: 0.2 s a measure); inside :func:`settled_heap` it walks only what is new.

What neither count sees: a loop inside one C builtin that neither runs bytecode nor allocates
(``sum(itertools.islice(xs, i))``, ``xs.index(x)``).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_EVENTS = ("call", "line", "return", "exception", "opcode")


@dataclass(frozen=True)
class Work:
    """What one call cost: bytecode instructions executed and bytes allocated, both counted while it ran."""

    instructions: int
    allocated_bytes: int
    complete: bool = True
    """False when counting stopped at the instruction limit; the counts are then lower bounds."""


def measure_work(call: Callable[[], Any], instruction_limit: int | None = None) -> Work:
    """Run ``call()`` once under the tracer and return its :class:`Work`.

    With ``instruction_limit``, counting stops once more instructions than that have run (the call then finishes
    untraced, at full speed), so a quadratic subject costs no more to judge than the bound it breaks.
    """
    counts = dict.fromkeys(_EVENTS, 0)
    volume = 0
    last = 0
    stopped = False
    read, reset = tracemalloc.get_traced_memory, tracemalloc.reset_peak

    def tracer(frame: Any, event: str, arg: object) -> Any:
        nonlocal volume, last, stopped
        if stopped:
            frame.f_trace_opcodes = False
            frame.f_trace = None
            return None
        frame.f_trace_opcodes = True
        # Between reading and resetting the peak, whatever the tracer allocates and frees leaves no trace, and at the
        # reset it holds as much as at the reading: the int just read replaced the one ``last`` held.
        current, peak = read()
        counts[event] += 1
        volume += peak - last
        del peak
        last = current
        del current
        if instruction_limit is not None and counts["opcode"] > instruction_limit:
            stopped = True
            sys.settrace(None)
            frame.f_trace_opcodes = False
            return None
        reset()
        return tracer

    was_tracing, gc_enabled, previous = tracemalloc.is_tracing(), gc.isenabled(), sys.gettrace()
    gc.collect()
    gc.disable()
    if not was_tracing:
        tracemalloc.start()
    try:
        last = read()[0]
        last += sys.getsizeof(last)
        reset()
        sys.settrace(tracer)
        try:
            call()
        finally:
            sys.settrace(previous)
    finally:
        if not was_tracing:
            tracemalloc.stop()
        if gc_enabled:
            gc.enable()
    return Work(counts["opcode"], volume, complete=not stopped)


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Collect once, then keep what survived out of the collections of the measures taken inside (``gc.freeze``):
    they still clear the free lists and collect every new object, so the counts are the same, only cheaper."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
