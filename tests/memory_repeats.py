"""The largest-buffer case repeated on one warm rank pool: how often its memory verdict is red for one subject.

Run in a target venv from the repository root: ``python -m tests.memory_repeats SUBJECT REPEATS [--allocator cuda]
[--population tiny]``. Prints one JSON object: the repeats, how many were red, the range of the subject's peak against
the bound, and the distinct problems seen. The memory bound must give the same verdict every time
(``tests/e2e/test_memory_bound_repeats.py``): a design whose memory is O(budget) never red, one that holds every grad
at once always red; counted in the CUDA caching allocator's blocks too (``--allocator cuda``, on CPU tensors), and on
grads so small that every buffer is smaller than one block (``--population tiny``).
"""

from __future__ import annotations

import argparse
import json

from harness.contracts.equivalence import compare_task
from harness.contracts.populations import LARGEST_BUFFER, LARGEST_BUFFER_BUDGET, FakeParameter, Population
from harness.ranks import megatron_state
from harness.ranks.pool import RankPool
from harness.subjects.loading import resolve_subject

TINY = Population(
    chunks=(
        tuple(FakeParameter(f"norm{i}.weight", 5, "fp32", "main_grad", sequence_parallel=True) for i in range(1024)),
    ),
    sequence_parallel=True,
    qk_layernorm=False,
    seed=3,
)
"""1024 sequence-parallel grads of 20 bytes each (20 KiB), reduced under a budget of 48 bytes: two grads to a chunk,
staged in a 40-byte buffer, which the CUDA allocator counts as a 512-byte block."""
TINY_BUDGET = 48
POPULATIONS = {"largest": (LARGEST_BUFFER, LARGEST_BUFFER_BUDGET), "tiny": (TINY, TINY_BUDGET)}


def repeat(subject: str, repeats: int, allocator: str | None = None, population: str = "largest") -> dict[str, object]:
    grads, budget = POPULATIONS[population]
    red, problems, peaks, bound = 0, set(), [], 0
    resolved = resolve_subject(subject)
    pool = RankPool(2, "gloo")
    try:
        with megatron_state.model_parallel(pool, 2):
            for _ in range(repeats):
                reports = pool.run(compare_task, grads, resolved, budget, 2, True, allocator=allocator)
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
    parser = argparse.ArgumentParser(prog="python -m tests.memory_repeats")
    parser.add_argument("subject")
    parser.add_argument("repeats", type=int)
    parser.add_argument("--allocator", choices=["host", "cuda"])
    parser.add_argument("--population", choices=sorted(POPULATIONS), default="largest")
    options = parser.parse_args()
    print(json.dumps(repeat(options.subject, options.repeats, options.allocator, options.population)))
