"""Expected-failure files: listed reds become xfail, a listed case that passes fails the run, stale lines are named."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.pytest_helpers import ROOT, SEEDED, run_target_cases

SESSION = "megatron-0.15"


def _matrix_with_expectations(tmp_path: Path, lines: list[str]) -> Path:
    expectations = tmp_path / "expected.txt"
    expectations.write_text("# seeded expectations\n" + "\n".join(lines) + "\n")
    document = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    entry = next(t for t in document["targets"] if t["session"] == SESSION)
    entry["expected_failures"] = str(expectations)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"targets": [entry]}))
    return matrix


def test_listed_failure_is_xfail_and_stale_lines_are_reported(tmp_path: Path) -> None:
    matrix = _matrix_with_expectations(
        tmp_path,
        ["cases/test_chunk_splitting.py::test_partition  # the last chunk dropped", "cases/test_nowhere.py::test_gone"],
    )
    run = run_target_cases(
        SESSION,
        ["cases/test_chunk_splitting.py::test_partition", "cases/test_chunk_splitting.py::test_alignment"],
        tmp_path,
        subject=SEEDED / "chunk_splitting_last_dropped.py",
        extra=[f"--matrix={matrix}"],
    )
    assert run.returncode == 0, run.output[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["counts"]["xfailed"] == 1 and summary["counts"]["passed"] == 1, summary["counts"]
    assert summary["stale_expected_failures"] == ["cases/test_nowhere.py::test_gone"]
    assert "'cases/test_nowhere.py::test_gone' matches no test" in run.output


def test_listed_case_that_passes_fails_the_run(tmp_path: Path) -> None:
    matrix = _matrix_with_expectations(tmp_path, ["cases/test_chunk_splitting.py::test_alignment"])
    run = run_target_cases(
        SESSION,
        ["cases/test_chunk_splitting.py::test_alignment"],
        tmp_path,
        subject=SEEDED / "chunk_splitting_last_dropped.py",
        extra=[f"--matrix={matrix}"],
    )
    assert run.returncode == 1, run.output[-3000:]
    assert "XPASS(strict)" in run.output
