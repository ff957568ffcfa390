"""``nox -s candidate``: what a spec names, what its metadata says, which Python and baseline it gets, and one clear
line for every spec the gate cannot use."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from harness.targets import candidate
from harness.targets.candidate import Candidate, CandidateError
from harness.targets.interpreters import running_version
from harness.targets.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]


def wheel(directory: Path, name: str, version: str, requires_python: str | None) -> Path:
    """A wheel file holding only its METADATA, which is all the candidate reads before installing."""
    path = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
    return path


def test_specs_are_classified(tmp_path: Path) -> None:
    tree = tmp_path / "Megatron-LM"
    (tree / "megatron" / "core").mkdir(parents=True)
    whl = wheel(tmp_path, "megatron-core", "0.19.2", ">=3.12")
    assert candidate.classify("megatron-core==0.19.2") == ("pypi", "megatron-core==0.19.2")
    assert candidate.classify(str(whl)) == ("wheel", str(whl))
    assert candidate.classify(str(tree)) == ("tree", str(tree))
    url = "git+https://github.com/NVIDIA/Megatron-LM.git@core_r0.19.0"
    assert candidate.classify(url) == ("git", url)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("megatron-core", "pin a version"),
        ("torch==2.13.0", "names torch, not megatron-core"),
        ("missing.whl", "no such wheel file"),
        ("git+ssh://host/repo.git", "must start with git+https://"),
        ("not a spec!", "neither a pip requirement"),
    ],
)
def test_unusable_specs_are_one_line_naming_spec_and_reason(spec: str, reason: str) -> None:
    with pytest.raises(CandidateError) as caught:
        candidate.classify(spec)
    assert str(caught.value).startswith(f"candidate {spec}: ") and reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_directory_without_megatron_core_is_not_a_tree(tmp_path: Path) -> None:
    with pytest.raises(CandidateError, match="holds no megatron/core package"):
        candidate.classify(str(tmp_path))


def test_wheel_metadata_is_read_and_other_wheels_refused(tmp_path: Path) -> None:
    assert candidate.wheel_metadata(wheel(tmp_path, "megatron-core", "0.19.2", ">=3.12"), "s") == (
        "0.19.2",
        SpecifierSet(">=3.12"),
    )
    with pytest.raises(CandidateError, match="the wheel is 'torch', not a megatron-core wheel"):
        candidate.wheel_metadata(wheel(tmp_path, "torch", "2.13.0", None), "s")
    broken = tmp_path / "broken.whl"
    broken.write_text("not a zip")
    with pytest.raises(CandidateError, match="not a zip archive"):
        candidate.wheel_metadata(broken, "s")


def test_tree_metadata_reads_package_info_and_pyproject(tmp_path: Path) -> None:
    core = tmp_path / "megatron" / "core"
    core.mkdir(parents=True)
    (core / "package_info.py").write_text("MAJOR = 0\nMINOR = 20\nPATCH = 0\nPRE_RELEASE = 'rc1'\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "megatron-core"\nrequires-python = ">=3.12"\n')
    assert candidate.tree_metadata(tmp_path, "s") == ("0.20.0rc1", SpecifierSet(">=3.12"))


def test_python_is_the_running_one_when_admitted_else_the_lowest_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    found = Candidate("s", "pypi", "s", "0.16.1", SpecifierSet(">=3.10"))
    assert candidate.pick_python(found) == running_version()
    newer = f"3.{sys.version_info[1] + 1}"
    installed = {newer, f"3.{sys.version_info[1] + 2}"}
    monkeypatch.setattr(candidate, "find_interpreter", lambda v: Path("/x") if v in installed else None)
    assert candidate.pick_python(Candidate("s", "pypi", "s", "9", SpecifierSet(f">={newer}"))) == newer
    monkeypatch.setattr(candidate, "find_interpreter", lambda v: None)
    with pytest.raises(CandidateError, match=rf"requires Python >={newer} and no such interpreter was found"):
        candidate.pick_python(Candidate("s", "pypi", "s", "9", SpecifierSet(f">={newer}")))


def test_baseline_is_the_newest_target_with_another_version() -> None:
    targets = load_matrix(ROOT / "matrix.yaml").targets
    assert candidate.baseline_for("0.19.2", targets).session == "megatron-0.18"
    assert candidate.baseline_for("0.20.0", targets).session == targets[-1].session
    assert candidate.baseline_for(None, targets).session == targets[-1].session


def test_a_nightly_build_takes_the_call_shapes_of_the_release_at_or_below_it(tmp_path: Path) -> None:
    """A build of main between 0.15.3 and 0.16.0 ships no megatron/training: its provider call shapes are 0.15's,
    not the newest target's (0.19's shapes would make every pre-0.17 build look like 0.19)."""
    targets = load_matrix(ROOT / "matrix.yaml").targets
    assert candidate.release_at_or_below("0.16.0rc0.dev100085", targets).session == "megatron-0.15"
    assert candidate.release_at_or_below("0.17.0rc0", targets).session == "megatron-0.16"
    assert candidate.release_at_or_below("0.19.2", targets).session == "megatron-0.19"
    assert candidate.release_at_or_below("0.12.0", targets).session == targets[-1].session
    assert candidate.release_at_or_below(None, targets).session == targets[-1].session
    nightly = Candidate("megatron-core==0.16.0rc0.dev100085", "pypi", "x", "0.16.0rc0.dev100085", None)
    shapes = candidate.release_at_or_below(nightly.version, targets)
    entry = candidate.matrix_entry(nightly, "3.11", targets[-1], tmp_path / "xfail.txt", shapes)
    assert entry["provider"]["process_group_keyword"] == shapes.provider.process_group_keyword
    assert entry["provider"]["calls"] == {s: list(k) for s, k in shapes.provider.calls.items()}
    assert entry["torch"] == str(targets[-1].torch)
    _, notes = candidate.with_derived_contract(entry, {"process_group_keyword": "x", "calls": None}, shapes.session)
    assert any("at or below it (megatron-0.15)" in note for note in notes), notes


def test_derived_contract_replaces_the_baseline_shapes(tmp_path: Path) -> None:
    newest = load_matrix(ROOT / "matrix.yaml").targets[-1]
    found = Candidate("megatron-core==0.20.0", "pypi", "megatron-core==0.20.0", "0.20.0", None)
    entry = candidate.matrix_entry(found, "3.12", newest, tmp_path / "xfail.txt")
    derived = {
        "process_group_keyword": "pgs",
        "file": "training.py",
        "calls": {"plain": ["pre_process", "post_process", "x"]},
    }
    updated, notes = candidate.with_derived_contract(entry, derived)
    assert updated["provider"] == {
        "process_group_keyword": "pgs",
        "calls": {"plain": ["pre_process", "post_process", "x"]},
    }
    assert any("read from training.py" in note for note in notes)
    kept, notes = candidate.with_derived_contract(entry, {**derived, "calls": None})
    assert kept["provider"]["calls"] == entry["provider"]["calls"]
    assert any("nearest matrix release at or below it (the newest target)" in note for note in notes)
    matrix = load_matrix(candidate.write_matrix(updated, tmp_path / "matrix.yaml"))
    assert [t.session for t in matrix.targets] == [candidate.SESSION]


def test_pip_refusal_names_the_newest_release() -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement megatron-core==0.99 "
        "(from versions: 0.18.2, 0.19.0rc1, 0.19.2, 0.20.0.dev5)\nERROR: No matching distribution found\n"
    )
    assert candidate._pip_reason(stderr, "s") == (
        "no release of megatron-core on the package index matches it (newest release: 0.19.2)"
    )


def test_a_version_the_index_lacks_ends_the_session_in_one_line() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "candidate", "--", "megatron-core==0.99"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode != 0
    aborted = [line for line in completed.stderr.splitlines() if "Session candidate aborted" in line]
    assert aborted and "candidate megatron-core==0.99: no release of megatron-core on the package index" in aborted[0]
