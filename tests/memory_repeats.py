"""The largest-buffer case repeated on one warm rank pool: how often its memory verdict is red for one subject.

Run in a target venv from the repository root: ``python -m tests.memory_repeats SUBJECT REPEATS``. Prints one JSON
object: the repeats, how many were red, the range of the subject's peak against the bound, and the distinct problems
seen. The memory bound must give the same verdict
every time (``tests/e2e/test_memory_bound_repeats.py``): a design whose memory is O(budget) never red, one that
holds every grad at once always red.
"""

from __future__ import annotations

import json
import sys

from harness.contracts.equivalence import compare_task
from harness.contracts.populations import LARGEST_BUFFER, LARGEST_BUFFER_BUDGET
from harness.ranks import megatron_state
from harness.ranks.pool import RankPool
from harness.subjects.loading import resolve_subject


def repeat(subject: str, repeats: int) -> dict[str, object]:
    red, problems, peaks, bound = 0, set(), [], 0
    resolved = resolve_subject(subject)
    pool = RankPool(2, "gloo")
    try:
        with megatron_state.model_parallel(pool, 2):
            for _ in range(repeats):
                reports = pool.run(compare_task, LARGEST_BUFFER, resolved, LARGEST_BUFFER_BUDGET, 2, True)
                seen = {problem.split(": ", 1)[-1][:160] for report in reports for problem in report.problems}
                red += bool(seen)
                problems |= seen
                peaks += [report.allocations.peak_bytes for report in reports if report.allocations is not None]
                bound = max([bound] + [report.memory_bound_bytes for report in reports])
    finally:
        pool.close()
    peak = {"peak_bytes_max": max(peaks, default=0), "peak_bytes_min": min(peaks, default=0), "bound_bytes": bound}
    return {"subject": subject, "repeats": repeats, "red": red, **peak, "problems": sorted(problems)}


if __name__ == "__main__":
    print(json.dumps(repeat(sys.argv[1], int(sys.argv[2]))))
