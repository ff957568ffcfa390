"""Where a long run stands: done out of the total, and the time left at the pace so far.

The sensitivity catalogue and the bench run for many minutes with one line per step; with the count and an estimate
on each line a user tells a slow run from a stuck one, and knows whether to wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 05 min``: as precise as a glance at a progress line needs."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """Steps of a run that may finish on several threads at once (the sensitivity runner's workers)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()

    def advance(self) -> str:
        """Count one step done, and say where the run stands."""
        with self._lock:
            self.done += 1
            return self.status()

    def status(self) -> str:
        """``[12/206, 3 min so far, about 48 min left]``; the estimate assumes the steps left take the mean so far."""
        elapsed = self._clock() - self._started
        if self.done == 0:
            return f"[0/{self.total}, {duration(elapsed)} so far]"
        left = elapsed / self.done * (self.total - self.done)
        return f"[{self.done}/{self.total}, {duration(elapsed)} so far, about {duration(left)} left]"
