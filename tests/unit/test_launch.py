"""The ``megatron-conformance`` command's plan: which subject, where the venvs and reports go, and what reaches nox.

The command runs from a framework's checkout, so every path it hands to the sessions (which run from the gate's own
root) must be absolute, and a run that falls back to the reference subject must say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.formats.environment import (
    ENVDIR_ENV_VAR,
    LAUNCHER_ENV_VAR,
    REPORTS_ENV_VAR,
    SUBJECT_ENV_VAR,
)
from harness.formats.red_section import repro_line
from harness.launch.command import GATE_ROOT, UsageError, main, needs_subject, plan, split_subject
from harness.source.scan_subject import matrix_releases

DECLARED = '[project]\nname = "fw"\n\n[tool.megatron-conformance]\nsubject = { source_root = "." }\n'


def test_subject_is_taken_out_before_the_pytest_arguments_only() -> None:
    assert split_subject(["-s", "megatron-0.15", "--subject", "a.toml"]) == (["a.toml"], ["-s", "megatron-0.15"])
    assert split_subject(["--subject=b.toml", "-R"]) == (["b.toml"], ["-R"])
    assert split_subject(["-s", "x", "--", "--subject=c.py"]) == ([], ["-s", "x", "--", "--subject=c.py"])
    assert split_subject(["--subject", "a.toml", "-R", "--subject=b"]) == (["a.toml", "b"], ["-R"])
    with pytest.raises(UsageError, match="--subject needs a value"):
        split_subject(["-s", "x", "--subject"])


def test_the_declaration_of_the_nearest_pyproject_is_the_subject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    (tmp_path / "src" / "deep").mkdir(parents=True)
    invocation = plan(["-s", "megatron-0.15"], tmp_path / "src" / "deep", {})
    assert invocation.environment == {
        LAUNCHER_ENV_VAR: "megatron-conformance",
        REPORTS_ENV_VAR: str(tmp_path / "reports"),
        ENVDIR_ENV_VAR: str(tmp_path / ".nox" / "megatron-conformance"),
        SUBJECT_ENV_VAR: str(tmp_path / "pyproject.toml"),
    }
    assert invocation.nox_arguments == ["-f", str(GATE_ROOT / "noxfile.py"), "-s", "megatron-0.15"]
    assert invocation.notes == []


def test_subject_option_wins_and_a_path_is_made_absolute_even_when_missing(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    (tmp_path / "other.toml").write_text("")
    invocation = plan(["--subject", "other.toml"], tmp_path, {SUBJECT_ENV_VAR: "elsewhere"})
    assert invocation.environment[SUBJECT_ENV_VAR] == str(tmp_path / "other.toml")
    missing = plan(["--subject=conf/missing.toml"], tmp_path, {})
    assert missing.environment[SUBJECT_ENV_VAR] == str(tmp_path / "conf" / "missing.toml")
    assert plan(["--subject=harness.reference"], tmp_path, {}).environment[SUBJECT_ENV_VAR] == "harness.reference"
    several = plan(["--subject", "a.toml", "--subject=b.py"], tmp_path, {}).environment[SUBJECT_ENV_VAR]
    assert several == f"{tmp_path / 'a.toml'},{tmp_path / 'b.py'}"
    assert plan([], tmp_path, {SUBJECT_ENV_VAR: "a.toml, b.py"}).environment[SUBJECT_ENV_VAR] == several


def test_the_environment_names_the_subject_over_a_declaration_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    invocation = plan([], tmp_path, {SUBJECT_ENV_VAR: "adapter.py"})
    assert invocation.environment[SUBJECT_ENV_VAR] == str(tmp_path / "adapter.py")
    assert invocation.notes == [
        f"megatron-conformance: {SUBJECT_ENV_VAR} names the subject; {tmp_path / 'pyproject.toml'}'s declaration "
        "is not used"
    ]


def test_a_nested_pyproject_without_the_table_does_not_hide_the_declaration_above(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "pyproject.toml").write_text('[project]\nname = "docs"\n')
    invocation = plan(["-s", "megatron-0.15"], tmp_path / "docs", {})
    assert invocation.environment[SUBJECT_ENV_VAR] == str(tmp_path / "pyproject.toml")
    assert invocation.environment[REPORTS_ENV_VAR] == str(tmp_path / "reports")


def test_a_run_that_would_check_no_adapter_of_the_framework_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fw"\n')
    for arguments in ([], ["-s", "megatron-0.15"], ["-s", "report", "megatron-0.15"], ["-t", "targets"]):
        with pytest.raises(UsageError, match=r"has a \[tool.megatron-conformance\] table, and no --subject"):
            plan(arguments, tmp_path, {})
    for arguments in (["-l"], ["-s", "report"], ["--list", "--json", "-t", "targets"], ["-s", "report", "--", "x"]):
        assert not needs_subject(arguments), arguments
        assert SUBJECT_ENV_VAR not in plan(arguments, tmp_path, {}).environment


def test_reports_and_venvs_set_by_the_user_are_kept_and_made_absolute(tmp_path: Path) -> None:
    environment = plan(["-l"], tmp_path, {REPORTS_ENV_VAR: "/r", ENVDIR_ENV_VAR: "venvs"}).environment
    assert (environment[REPORTS_ENV_VAR], environment[ENVDIR_ENV_VAR]) == ("/r", str(tmp_path / "venvs"))


def test_an_unreadable_pyproject_is_a_usage_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    monkeypatch.chdir(tmp_path)
    assert main(["-s", "megatron-0.15"]) == 2
    assert capsys.readouterr().err.startswith(f"megatron-conformance: {tmp_path / 'pyproject.toml'}: cannot be read")


def test_help_and_version_answer_without_running_nox(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: megatron-conformance [--subject PATH ...]")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("megatron-conformance ")


def test_repro_lines_start_with_the_command_that_ran_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    assert repro_line("megatron-0.15", "cases/t.py::c").startswith("nox -R -s megatron-0.15 -- ")
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "megatron-conformance")
    assert repro_line("megatron-0.15", "cases/t.py::c") == "megatron-conformance -R -s megatron-0.15 -- cases/t.py::c"


def test_scan_runs_in_a_child_with_the_gate_on_its_path_and_names_the_framework_venvs(tmp_path: Path) -> None:
    """``megatron-conformance scan`` from a framework's checkout: the scan runs with the gate's code, naming symbols
    against the framework's target venvs; none built here and no Megatron in this interpreter, against every
    release of the matrix, from the cache (one line on stderr says so)."""
    framework = tmp_path / "framework"
    (framework / "pkg").mkdir(parents=True)
    (framework / "pkg" / "__init__.py").write_text("from megatron.core.parallel_state import get_group\n")
    for release in matrix_releases():
        (tmp_path / "cache" / f"megatron-core-{release}" / "megatron" / "core").mkdir(parents=True)
        (tmp_path / "cache" / f"megatron-core-{release}" / "megatron" / "core" / "parallel_state.py").write_text(
            "def get_group():\n    return None\n"
        )
    script = f"import sys; sys.path.insert(0, {str(GATE_ROOT)!r}); from harness.launch.command import main; main()"
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["MEGATRON_CONFORMANCE_CACHE"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-c", script, "scan", str(framework)],
        cwd=framework,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("megatron-conformance scan: no target venv and no installed megatron-core: naming")
    assert f"megatron-core {', '.join(matrix_releases())}" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert '"megatron.core.parallel_state:get_group" = "reads"' in done.stdout
