"""The ``megatron-conformance`` command's plan: which subject, where the venvs and reports go, and what reaches nox.

The command runs from a framework's checkout, so every path it hands to the sessions (which run from the gate's own
root) must be absolute, and a run that falls back to the reference subject must say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.formats.environment import (
    ENVDIR_ENV_VAR,
    LAUNCHER_ENV_VAR,
    REPORTS_ENV_VAR,
    SUBJECT_ENV_VAR,
)
from harness.formats.red_section import repro_line
from harness.launch.command import GATE_ROOT, UsageError, main, plan, split_subject

DECLARED = '[project]\nname = "fw"\n\n[tool.megatron-conformance]\nsubject = { source_root = "." }\n'


def test_subject_is_taken_out_before_the_pytest_arguments_only() -> None:
    assert split_subject(["-s", "megatron-0.15", "--subject", "a.toml"]) == ("a.toml", ["-s", "megatron-0.15"])
    assert split_subject(["--subject=b.toml", "-R"]) == ("b.toml", ["-R"])
    assert split_subject(["-s", "x", "--", "--subject=c.py"]) == (None, ["-s", "x", "--", "--subject=c.py"])
    with pytest.raises(UsageError, match="--subject needs a value"):
        split_subject(["-s", "x", "--subject"])


def test_the_declaration_of_the_nearest_pyproject_is_the_subject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    (tmp_path / "src" / "deep").mkdir(parents=True)
    invocation = plan(["-s", "megatron-0.15"], tmp_path / "src" / "deep", {})
    assert invocation.environment == {
        LAUNCHER_ENV_VAR: "megatron-conformance",
        REPORTS_ENV_VAR: str(tmp_path / "reports"),
        ENVDIR_ENV_VAR: str(tmp_path / ".nox"),
        SUBJECT_ENV_VAR: str(tmp_path / "pyproject.toml"),
    }
    assert invocation.nox_arguments == ["-f", str(GATE_ROOT / "noxfile.py"), "-s", "megatron-0.15"]
    assert invocation.notes == []


def test_subject_option_wins_and_is_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    (tmp_path / "other.toml").write_text("")
    invocation = plan(["--subject", "other.toml"], tmp_path, {SUBJECT_ENV_VAR: "elsewhere"})
    assert invocation.environment[SUBJECT_ENV_VAR] == str(tmp_path / "other.toml")
    dotted = plan(["--subject=fw.adapter"], tmp_path, {})
    assert dotted.environment[SUBJECT_ENV_VAR] == "fw.adapter"


def test_the_reference_subject_is_never_a_silent_fallback(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fw"\n')
    invocation = plan([], tmp_path, {})
    assert SUBJECT_ENV_VAR not in invocation.environment
    assert invocation.notes == [
        f"megatron-conformance: {tmp_path / 'pyproject.toml'} has no [tool.megatron-conformance] and no --subject "
        "was given: checking the gate's reference subject"
    ]


def test_reports_and_venvs_set_by_the_user_are_kept(tmp_path: Path) -> None:
    environment = plan([], tmp_path, {REPORTS_ENV_VAR: "/r", ENVDIR_ENV_VAR: "/e"}).environment
    assert (environment[REPORTS_ENV_VAR], environment[ENVDIR_ENV_VAR]) == ("/r", "/e")


def test_an_unreadable_pyproject_is_a_usage_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    monkeypatch.chdir(tmp_path)
    assert main(["-s", "megatron-0.15"]) == 2
    assert capsys.readouterr().err.startswith(f"megatron-conformance: {tmp_path / 'pyproject.toml'}: cannot be read")


def test_help_and_version_answer_without_running_nox(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: megatron-conformance [--subject PATH]")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("megatron-conformance ")


def test_repro_lines_start_with_the_command_that_ran_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    assert repro_line("megatron-0.15", "cases/t.py::c").startswith("nox -R -s megatron-0.15 -- ")
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "megatron-conformance")
    assert repro_line("megatron-0.15", "cases/t.py::c") == "megatron-conformance -R -s megatron-0.15 -- cases/t.py::c"
