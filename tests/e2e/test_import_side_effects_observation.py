"""The import family's verdicts do not depend on what ran before in the process: the same in one process and on four
xdist workers, for the reference subject (green) and a seeded break (red on the same cases); and a patch applied
lazily, on the first call of a subject function, is red whichever case makes that call first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.plugin.command import case_command, run_cases
from tests.pytest_helpers import ROOT, SEEDED, RunVerdicts, target_python

SESSION = "megatron-0.15"
IMPORT_CASES = ["cases/test_import_side_effects.py"]
# The adapter's import beside the real Megatron: its effects on Megatron (mandatory), and the others (advisory: red
# for these strict module subjects).
REAL_IMPORT = ("changes_nothing", "has_no_other_effects")
FIXTURES = ROOT / "tests" / "import_fixtures"


def run(tmp_path: Path, selection: list[str], workers: str, subject: Path | None = None) -> RunVerdicts:
    options = [f"--subject={subject}"] if subject else []
    command = case_command(
        SESSION, tmp_path, selection, python=target_python(SESSION), workers=workers, profile="ci", options=options
    )
    return RunVerdicts.of(run_cases(command, timeout=900, keep_output=200_000))


@pytest.mark.parametrize("seeded", [None, "import_side_effects_logs"])
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
    subject = SEEDED / "import_side_effects_patches_on_first_call.py"
    alone = run(tmp_path / "alone", IMPORT_CASES, "0", subject)
    failed = alone.require_red("lazy patch, import family alone")
    assert any(
        name.startswith("test_first_calls_of_the_subject_change_nothing") and "finalize_model_grads" in text
        for name, text in failed.items()
    ), alone.output[-3000:]
    after_chunks = run(
        tmp_path / "after", ["cases/test_chunk_splitting.py::test_partition", *IMPORT_CASES], "0", subject
    )
    failed = after_chunks.require_red("lazy patch, called first by the chunk cases")
    watch = [text for name, text in failed.items() if name.startswith("test_partition")]
    assert watch and "changed during cases/test_chunk_splitting.py::test_partition" in watch[0], after_chunks.output[
        -3000:
    ]
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
    selection = [f"{IMPORT_CASES[0]}::test_importing_the_adapter_with_real_megatron_{case}" for case in REAL_IMPORT]
    waived = run(tmp_path / "waived", selection, "0", subject)
    assert waived.returncode == 0, waived.output[-3000:]
    summary = json.loads((tmp_path / "waived" / "summary.json").read_text())
    read = "read (unset) at reads_env/__init__.py:5"
    waiver = {"kind": "env-read", "name": "ADAPTER_CHUNK_BYTES", "allowed_by": "ADAPTER_*", "detail": read}
    assert waiver in summary["waivers"], summary["waivers"]
    assert f"env-read ADAPTER_CHUNK_BYTES: {read} (allowed by 'ADAPTER_*')" in waived.output
    subject.write_text(subject.read_text().replace("'ADAPTER_*'", "'OTHER_*'"))
    red = run(tmp_path / "red", selection, "0", subject)
    reds = red.require_red("waiver for another name").values()
    assert any(f"env-read ADAPTER_CHUNK_BYTES: {read}" in text for text in reds), red.output[-3000:]


def test_the_budget_variable_read_at_import_is_listed_not_reported(tmp_path: Path) -> None:
    """The same adapter, its read variable named as the subject's budget (``BUDGET_ENV_VAR``) and waived by nothing
    else: green, the read listed as a waiver with its file and line; without the name it is red (the seeded break)."""
    subject = tmp_path / "budget_subject.py"
    subject.write_text(
        "import sys\n"
        "from harness.reference import *  # noqa: F403\n"
        f"sys.path.insert(0, {str(SEEDED / 'adapters')!r})\n"
        "ADAPTER_PACKAGE = 'reads_env'\n"
        "BUDGET_ENV_VAR = 'ADAPTER_CHUNK_BYTES'\n"
        "IMPORT_SIDE_EFFECTS_ALLOWED = {'sys-path': ['sys.path']}\n"
    )
    selection = [f"{IMPORT_CASES[0]}::test_importing_the_adapter_with_real_megatron_{case}" for case in REAL_IMPORT]
    listed = run(tmp_path / "listed", selection, "0", subject)
    assert listed.returncode == 0, listed.output[-3000:]
    waivers = json.loads((tmp_path / "listed" / "summary.json").read_text())["waivers"]
    assert {
        "kind": "env-read",
        "name": "ADAPTER_CHUNK_BYTES",
        "allowed_by": "BUDGET_ENV_VAR",
        "detail": "read (unset) at reads_env/__init__.py:5",
    } in waivers, waivers
    subject.write_text(subject.read_text().replace("BUDGET_ENV_VAR = 'ADAPTER_CHUNK_BYTES'", "BUDGET_ENV_VAR = None"))
    red = run(tmp_path / "red", selection, "0", subject)
    assert any("env-read ADAPTER_CHUNK_BYTES" in text for text in red.require_red("budget not named").values())


def fixture_declaration(tmp_path: Path, package: str) -> Path:
    """A declaration of the import fixture ``package`` alone: no role but the adapter package, not strict."""
    path = tmp_path / package / "megatron-conformance.toml"
    path.parent.mkdir(parents=True)
    path.write_text(f'subject = {{ source_root = "{FIXTURES}", adapter_package = "{package}" }}\n')
    return path


BESIDE_FAKES = [
    f"{IMPORT_CASES[0]}::test_importing_the_adapter_with_real_megatron_changes_nothing",
    f"{IMPORT_CASES[0]}::test_importing_the_adapter_with_only_fakes_changes_nothing",
    f"{IMPORT_CASES[0]}::test_the_adapter_can_be_observed_beside_fakes",
]


def test_an_adapter_that_inspects_a_signature_at_import_is_green_beside_fakes(tmp_path: Path) -> None:
    """``inspect.signature(_get_main_grad_attr)`` at import, catching only ImportError: the fake carries the
    installed target's signature, so the import is observed beside the fakes and is clean."""
    declaration = fixture_declaration(tmp_path, "inspects_signature")
    green = run(tmp_path / "report", BESIDE_FAKES, "0", declaration)
    verdicts = {name: verdict for name, (verdict, _) in green.verdicts.items()}
    assert green.returncode == 0 and set(verdicts.values()) == {"passed"}, green.output[-3000:]
    assert len(verdicts) == len(BESIDE_FAKES)
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["advisories"] == []


def test_an_adapter_that_cannot_be_imported_beside_fakes_gets_an_advisory(tmp_path: Path) -> None:
    """An import that raises for another reason beside the fakes (a dataclass's fields) is no side-effect red and no
    crash: the fakes case is skipped, and the advisory names the exception with its repro line."""
    declaration = fixture_declaration(tmp_path, "raises_beside_fakes")
    advised = run(tmp_path / "report", BESIDE_FAKES, "0", declaration)
    verdicts = {name: verdict for name, (verdict, _) in advised.verdicts.items()}
    assert advised.returncode == 0, advised.output[-3000:]
    assert verdicts == {
        "test_importing_the_adapter_with_real_megatron_changes_nothing": "passed",
        "test_importing_the_adapter_with_only_fakes_changes_nothing": "skipped",
        "test_the_adapter_can_be_observed_beside_fakes": "passed",
    }, advised.output[-3000:]
    (advisory,) = json.loads((tmp_path / "report" / "summary.json").read_text())["advisories"]
    assert advisory["family"] == "import-side-effects"
    assert advisory["text"].startswith(
        f"[{SESSION}] import-side-effects: raises_beside_fakes could not be observed beside fakes: TypeError"
    ), advisory
    assert advisory["repro"].endswith(
        "cases/test_import_side_effects.py::test_the_adapter_can_be_observed_beside_fakes"
    )
    assert f"MEGATRON_CONFORMANCE_SUBJECT={declaration}" in advisory["repro"]
