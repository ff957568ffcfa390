"""An error of the gate's own example generator, in a real target session: the session and the nox run end with the
gate's own status and one line naming the strategy, and nothing reads as a red of the subject."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.formats.generator_error import GATE_ERROR_STATUS, NOT_A_VERDICT, PREFIX
from harness.formats.summary import read_summary
from harness.reports.failures import KINDS
from tests.pytest_helpers import ROOT, target_python

SESSION = "megatron-0.15"
CASE = "cases/test_chunk_splitting.py::test_partition"
STRATEGY = "tests.broken_generator:budgets_from_an_empty_interval"


def test_a_generator_error_ends_the_run_with_the_gates_own_status_and_line(tmp_path: Path) -> None:
    target_python(SESSION)  # the venv nox -R reuses
    env = {**os.environ, "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path)}
    nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-R", "-s", SESSION]
    gate = subprocess.run(
        [*nox, "--", CASE, "-p", "tests.broken_generator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = gate.stdout + gate.stderr
    assert gate.returncode == GATE_ERROR_STATUS, output[-4000:]
    line = f"{PREFIX}: {STRATEGY} raised InvalidArgument"
    assert (
        f"Session {SESSION} aborted: target {SESSION}: {line}" in output
        and f"{NOT_A_VERDICT} (exit {GATE_ERROR_STATUS})" in output
    )
    assert f"target {SESSION} | contract chunk-splitting" not in output, "a generator error read as a red"
    summary = read_summary(tmp_path / SESSION)
    assert summary.exit_status == GATE_ERROR_STATUS
    assert [error["case"] for error in summary.gate_errors] == [CASE]
    assert summary.gate_errors[0]["text"].startswith(line)
    report = subprocess.run(
        [*nox[:-3], "-s", "report", "--", SESSION], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-3000:]
    markdown = (tmp_path / "compatibility.md").read_text()
    assert KINDS["gate-error"] in markdown and f"the gate's own error, not a verdict: {CASE}: {line}" in markdown


def test_the_same_case_with_the_gates_own_strategies_is_green(tmp_path: Path) -> None:
    """The correct variant: the generator as the gate ships it, the same case, the same command."""
    target_python(SESSION)
    env = {**os.environ, "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path)}
    nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-R", "-s", SESSION]
    gate = subprocess.run([*nox, "--", CASE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert gate.returncode == 0, (gate.stdout + gate.stderr)[-4000:]
    assert read_summary(tmp_path / SESSION).gate_errors == []
