"""The target sessions the project's tests run first, two at a time: every one runs, each output is printed whole,
and a failing one is reported as failed, never lost among the others."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from harness.launch.side_by_side import DEFAULT_JOBS, jobs_from, run_side_by_side

# Each command marks itself running, records how many were running at its peak, waits, and exits with its status.
_WORKER = """
import os, sys, time
from pathlib import Path
marks = Path(sys.argv[1])
me = marks / sys.argv[2]
me.touch()
peak = 0
for _ in range(20):
    peak = max(peak, len(list(marks.iterdir())))
    time.sleep(0.02)
(marks.parent / ("peak-" + sys.argv[2])).write_text(str(peak))
me.unlink()
for n in range(3):
    print(sys.argv[2], "line", n, flush=True)
sys.exit(int(sys.argv[3]))
"""


def _commands(tmp_path: Path, statuses: dict[str, int]) -> dict[str, list[str]]:
    marks = tmp_path / "marks"
    marks.mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(_WORKER)
    return {name: [sys.executable, str(worker), str(marks), name, str(status)] for name, status in statuses.items()}


def test_every_command_runs_at_most_jobs_at_a_time_and_each_output_is_whole(tmp_path: Path) -> None:
    out = io.StringIO()
    statuses = {"a": 0, "b": 3, "c": 0, "d": 0}
    ended = run_side_by_side(_commands(tmp_path, statuses), 2, tmp_path / "logs", os.environ, out, poll_s=0.01)
    assert sorted(done.name for done in ended) == sorted(statuses)
    assert {done.name: done.returncode for done in ended} == statuses
    peaks = [int((tmp_path / f"peak-{name}").read_text()) for name in statuses]
    assert max(peaks) == 2, peaks
    printed = out.getvalue()
    for name, status in statuses.items():
        block = printed.split(f"===== {name} (")[1].split(f"===== end of {name}\n")[0]
        assert block.startswith("ok," if status == 0 else f"exit {status},"), block
        assert block.splitlines()[1:] == [f"{name} line {n}" for n in range(3)], block


def test_one_job_runs_them_one_after_another(tmp_path: Path) -> None:
    ended = run_side_by_side(_commands(tmp_path, {"a": 0, "b": 0}), 1, tmp_path / "logs", os.environ, io.StringIO())
    assert [done.name for done in ended] == ["a", "b"]
    assert all(int((tmp_path / f"peak-{name}").read_text()) == 1 for name in "ab")


def test_no_jobs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_side_by_side({"a": ["true"]}, 0, tmp_path, os.environ, io.StringIO())


def test_the_number_at_once_is_a_whole_number_or_one_line_naming_the_variable() -> None:
    assert jobs_from(None) == jobs_from("") == DEFAULT_JOBS
    assert jobs_from("3") == 3
    for value in ("0", "two", "-1", "1.5"):
        with pytest.raises(ValueError, match=f"MEGATRON_CONFORMANCE_TARGET_JOBS='{value}'"):
            jobs_from(value)
