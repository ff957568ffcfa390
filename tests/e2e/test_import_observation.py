"""The import family's verdicts do not depend on what ran before in the process: the same in one process and on four
xdist workers, for the reference subject (green) and a seeded break (red on the same cases); and a patch applied
lazily, on the first call of a subject function, is red whichever case makes that call first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.plugin.command import case_command, run_cases
from tests.pytest_helpers import SEEDED, RunVerdicts, target_python

SESSION = "megatron-0.15"
IMPORT_CASES = ["cases/test_import.py"]


def run(tmp_path: Path, selection: list[str], workers: str, subject: Path | None = None) -> RunVerdicts:
    options = [f"--subject={subject}"] if subject else []
    command = case_command(
        SESSION, tmp_path, selection, python=target_python(SESSION), workers=workers, profile="ci", options=options
    )
    return RunVerdicts.of(run_cases(command, timeout=900, keep_output=200_000))


@pytest.mark.parametrize("seeded", [None, "import_logs"])
def test_verdicts_are_the_same_in_one_process_and_on_four_workers(seeded: str | None, tmp_path: Path) -> None:
    subject = SEEDED / f"{seeded}.py" if seeded else None
    single = run(tmp_path / "single", IMPORT_CASES, "0", subject)
    spread = run(tmp_path / "spread", IMPORT_CASES, "4", subject)
    verdicts = {name: verdict for name, (verdict, _) in single.verdicts.items()}
    assert verdicts, single.output[-3000:]
    assert verdicts == {name: verdict for name, (verdict, _) in spread.verdicts.items()}, spread.output[-3000:]
    if seeded is None:
        assert single.returncode == 0 and set(verdicts.values()) == {"passed"}, single.output[-3000:]
    else:
        assert single.returncode == 1 and "failed" in verdicts.values()


def test_a_lazy_patch_is_red_where_the_first_call_happens(tmp_path: Path) -> None:
    subject = SEEDED / "import_patches_on_first_call.py"
    alone = run(tmp_path / "alone", IMPORT_CASES, "0", subject)
    failed = alone.require_red("lazy patch, import family alone")
    assert any(
        name.startswith("test_first_calls_of_the_subject_change_nothing") and "finalize_model_grads" in text
        for name, text in failed.items()
    ), alone.output[-3000:]
    after_chunks = run(tmp_path / "after", ["cases/test_chunks.py::test_partition", *IMPORT_CASES], "0", subject)
    failed = after_chunks.require_red("lazy patch, called first by the chunk cases")
    watch = [text for name, text in failed.items() if name.startswith("test_partition")]
    assert watch and "first seen after cases/test_chunks.py::test_partition" in watch[0], after_chunks.output[-3000:]
    assert "finalize_model_grads" in watch[0]


def test_adapter_package_by_module_name_and_waivers_per_name(tmp_path: Path) -> None:
    """``ADAPTER_PACKAGE`` given as a module name is found without a path; an effect the subject waives by name is
    green, and the waiver is written to summary.json and printed."""
    subject = tmp_path / "waiving_subject.py"
    subject.write_text(
        "import sys\n"
        "from harness.reference import *  # noqa: F403\n"
        f"sys.path.insert(0, {str(SEEDED / 'adapters')!r})\n"
        "ADAPTER_PACKAGE = 'reads_env'\n"
        "IMPORT_SIDE_EFFECTS_ALLOWED = {'env-read': ['ADAPTER_*'], 'sys-path': ['sys.path']}\n"
    )
    selection = [f"{IMPORT_CASES[0]}::test_importing_the_adapter_with_real_megatron_changes_nothing"]
    waived = run(tmp_path / "waived", selection, "0", subject)
    assert waived.returncode == 0, waived.output[-3000:]
    summary = json.loads((tmp_path / "waived" / "summary.json").read_text())
    assert {"kind": "env-read", "name": "ADAPTER_CHUNK_BYTES", "allowed_by": "ADAPTER_*"} in summary["waivers"]
    assert "env-read ADAPTER_CHUNK_BYTES (allowed by 'ADAPTER_*')" in waived.output
    subject.write_text(subject.read_text().replace("'ADAPTER_*'", "'OTHER_*'"))
    red = run(tmp_path / "red", selection, "0", subject)
    assert any("env-read ADAPTER_CHUNK_BYTES" in text for text in red.require_red("waiver for another name").values())
