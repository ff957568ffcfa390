"""Several subjects in one warm run on a real target: each subject's verdicts are its own, whatever ran before it in
the run, a broken session is never a red verdict, and torch and Megatron are imported once: by the warm run, whose
fork server is its own fork rather than an interpreter that imports them again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.formats.environment import REFERENCE_SUBJECT, SUBJECT_ENV_VAR
from harness.plugin.command import OUTPUT_FILE, SUBJECT_STATUS_FILE, case_command, subject_folder, subject_runs
from harness.ranks.rank_warnings import WARNINGS_ENV_VAR
from tests.pytest_helpers import ROOT, SEEDED, target_python
from tests.report_helpers import comparison

SESSION = "megatron-0.15"
SELECTION = ["cases/test_equivalence.py::test_matches_upstream_on_generated_modules[world2-tp2-gloo]"]
REBINDS = str(SEEDED / "equivalence_rebinds_upstream_at_import.py")


def warm_run(subjects: list[str], tmp_path: Path) -> tuple[int, list]:
    warnings = tmp_path / "warnings"
    warnings.mkdir()
    command = case_command(SESSION, tmp_path / "reports", SELECTION, python=target_python(SESSION), subjects=subjects)
    return subject_runs(command, {**os.environ, WARNINGS_ENV_VAR: str(warnings)}, timeout=900, keep_output=200_000)


def test_a_subject_that_rebinds_upstream_leaves_the_next_subject_green_and_the_imports_are_paid_once(
    tmp_path: Path,
) -> None:
    status, runs = warm_run([REBINDS, REFERENCE_SUBJECT], tmp_path)
    assert status == 1
    red, green = runs
    assert red.returncode == 1 and red.failed(), red.output[-3000:]
    assert any("was replaced before the case ran" in text for text in red.failed().values())
    assert f"repro: MEGATRON_CONFORMANCE_SUBJECT={REBINDS} nox -R -s {SESSION} -- " in red.output
    assert green.returncode == 0 and not green.failed() and green.cases, green.output[-3000:]
    assert "was replaced before the case ran" not in green.output, "a subject's output holds only its own session"
    for index, spec in enumerate([REBINDS, REFERENCE_SUBJECT], 1):
        folder = subject_folder(tmp_path / "reports", index, spec)
        names = {"junit.xml", "summary.json", OUTPUT_FILE, SUBJECT_STATUS_FILE}
        assert names <= {path.name for path in folder.iterdir()}, sorted(folder.iterdir())
    warnings = tmp_path / "warnings"
    assert len(list(warnings.rglob("warm-*.jsonl"))) == 1, sorted(warnings.rglob("*"))
    assert not list(warnings.rglob("forkserver-*.jsonl")), "the fork server imported torch and Megatron again"


def test_a_subject_that_cannot_be_read_makes_the_run_broken_not_red(tmp_path: Path) -> None:
    declaration = tmp_path / "bad.toml"
    declaration.write_text('[subject]\nno_such_key = "x"\n')
    status, runs = warm_run([str(declaration), REFERENCE_SUBJECT], tmp_path)
    unreadable, reference = runs
    assert unreadable.returncode == 4, unreadable.output[-3000:]
    assert status == 4
    assert reference.returncode == 0, reference.output[-3000:]


def test_a_target_session_checks_each_subject_the_environment_names_and_the_report_has_a_matrix_each(
    tmp_path: Path,
) -> None:
    target_python(SESSION)  # the venv nox -R reuses
    seeded = str(SEEDED / "chunk_splitting_last_dropped.py")
    env = {
        **os.environ,
        "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path),
        SUBJECT_ENV_VAR: f"{seeded},{REFERENCE_SUBJECT}",
    }
    nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
    gate = subprocess.run(
        [*nox, "-R", "-s", SESSION, "--", "cases/test_chunk_splitting.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert gate.returncode == 1, gate.stdout[-3000:] + gate.stderr[-3000:]
    assert f"repro: MEGATRON_CONFORMANCE_SUBJECT={seeded} nox -R -s {SESSION} -- " in gate.stdout
    folders = sorted(path.name for path in (tmp_path / SESSION).iterdir())
    assert folders == ["1-chunk_splitting_last_dropped", "2-harness.reference"], folders
    report = subprocess.run(
        [*nox, "-s", "report", "--", SESSION], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-3000:]
    markdown = (tmp_path / "compatibility.md").read_text()
    headline = "1 target · 2 subjects · 5 reds: chunk_splitting_last_dropped.py 5 (megatron-0.15)."
    assert markdown.splitlines()[2] == headline
    baseline, targets, rows = comparison(markdown)
    assert (baseline, targets, rows) == (
        "`chunk_splitting_last_dropped.py`",
        [SESSION],
        {"`harness.reference`": ["✅ 5 fixed"]},
    )
    assert markdown.index("### Comparison") < markdown.index("### Summary"), "the comparison comes first"
    assert f"### Summary: subject `{seeded}` (module)" in markdown
    assert f"### Summary: subject `{REFERENCE_SUBJECT}` (module)" in markdown
