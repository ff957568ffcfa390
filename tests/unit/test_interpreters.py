"""Finding a target's Python where users keep it: PATH, pyenv, asdf, mise; past shims that do not run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.targets.interpreters import candidates, expose_on_path, find_interpreter, missing_message

ROOT = Path(__file__).resolve().parents[2]
BROKEN_SHIM = '#!/bin/sh\necho "pyenv: python3.12: command not found" >&2\nexit 127\n'


def fake_python(path: Path, reports: str) -> Path:
    """An executable that answers the version probe with ``reports``, as an interpreter of that version would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {reports}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """A HOME with nothing installed and a PATH holding only a broken pyenv shim for python3.12."""
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3.12"
    shim.write_text(BROKEN_SHIM)
    shim.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PATH": f"{shims}{os.pathsep}/usr/bin{os.pathsep}/bin"}


def test_pyenv_version_is_found_past_a_shim_that_does_not_run(machine: dict[str, str]) -> None:
    versions = Path(machine["HOME"]) / ".pyenv" / "versions"
    fake_python(versions / "3.12.1" / "bin" / "python3.12", "3.12")
    newest = fake_python(versions / "3.12.10" / "bin" / "python3.12", "3.12")
    fake_python(versions / "3.12-dev" / "bin" / "python3.12", "3.12")
    fake_python(versions / "3.13.0" / "bin" / "python3.12", "3.13")
    found = list(candidates("3.12", machine))
    assert found[0].parent.name == "shims", "PATH comes first"
    assert [p.parts[-3] for p in found[1:]] == ["3.12.10", "3.12.1"], "newest patch release first, no dev builds"
    assert find_interpreter("3.12", machine) == newest


def test_pyenv_root_asdf_and_mise_are_searched(machine: dict[str, str], tmp_path: Path) -> None:
    machine["PYENV_ROOT"] = str(tmp_path / "elsewhere")
    mise = Path(machine["HOME"]) / ".local" / "share" / "mise" / "installs" / "python"
    found = fake_python(mise / "3.12.3" / "bin" / "python3.12", "3.12")
    assert find_interpreter("3.12", machine) == found
    pyenv = fake_python(tmp_path / "elsewhere" / "versions" / "3.12.2" / "bin" / "python3.12", "3.12")
    assert find_interpreter("3.12", machine) == pyenv, "pyenv before mise"


def test_an_interpreter_reporting_another_version_is_not_taken(machine: dict[str, str]) -> None:
    fake_python(Path(machine["HOME"]) / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12", "3.11")
    assert find_interpreter("3.12", machine) is None


def test_found_interpreter_is_linked_first_on_path(machine: dict[str, str], tmp_path: Path) -> None:
    found = fake_python(Path(machine["HOME"]) / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12", "3.12")
    links = tmp_path / "links"
    assert expose_on_path("3.12", links, machine)
    assert machine["PATH"].split(os.pathsep)[0] == str(links)
    assert (links / "python3.12").resolve() == found.resolve()
    assert expose_on_path("3.12", links, machine) and machine["PATH"].count(str(links)) == 1


def test_missing_interpreter_is_one_line_naming_target_version_and_remedy(machine: dict[str, str]) -> None:
    assert not expose_on_path("3.12", Path(machine["HOME"]) / "links", machine)
    message = missing_message("megatron-0.19", "3.12")
    assert "\n" not in message
    assert message.startswith("target megatron-0.19 needs Python 3.12")
    assert "pyenv install 3.12" in message and "uv python install 3.12" in message


def test_a_target_whose_python_is_missing_ends_in_that_line(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    entry = document["targets"][-1]
    entry.update(session="megatron-9.9", python="3.99", expected_failures=str(ROOT / entry["expected_failures"]))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"targets": [entry]}))
    completed = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "megatron-9.9"],
        env={**os.environ, "MEGATRON_CONFORMANCE_MATRIX": str(matrix)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    aborted = [line for line in completed.stderr.splitlines() if "Session megatron-9.9 aborted" in line]
    assert aborted and missing_message("megatron-9.9", "3.99") in aborted[0], completed.stderr[-2000:]
