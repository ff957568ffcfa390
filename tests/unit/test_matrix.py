"""matrix.yaml schema: the shipped file is valid; every malformed entry fails in one line naming target and key."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.targets.matrix import MatrixError, load_matrix, venv_python
from tests.pytest_helpers import ROOT

SHIPPED = yaml.safe_load((ROOT / "matrix.yaml").read_text())


def write_matrix(tmp_path: Path, document: Any) -> Path:
    for entry in document.get("targets", []) if isinstance(document, dict) else []:
        if isinstance(entry, dict) and "expected_failures" in entry:
            entry["expected_failures"] = str(ROOT / entry["expected_failures"])
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def one_target(**changes: Any) -> dict[str, Any]:
    entry = copy.deepcopy(SHIPPED["targets"][0])
    for key, value in changes.items():
        if value is None and key in entry:
            del entry[key]
        else:
            entry[key] = value
    return {"targets": [entry]}


def test_shipped_matrix_has_the_seven_pinned_targets() -> None:
    matrix = load_matrix(ROOT / "matrix.yaml")
    pins = {t.session: (t.megatron.location, str(t.torch), str(t.numpy)) for t in matrix.targets}
    assert pins == {
        "megatron-0.13": ("megatron-core==0.13.1", "==2.13.0", "<2"),
        "megatron-0.14": ("megatron-core==0.14.0", "==2.13.0", "<2"),
        "megatron-0.15": ("megatron-core==0.15.3", "==2.13.0", "<2"),
        "megatron-0.16": ("megatron-core==0.16.1", "==2.13.0", "None"),
        "megatron-0.17": ("megatron-core==0.17.1", "==2.13.0", "None"),
        "megatron-0.18": ("megatron-core==0.18.2", "==2.13.0", "None"),
        "megatron-0.19": ("megatron-core==0.19.2", "==2.13.0", "None"),
    }
    pythons = {t.session: t.python for t in matrix.targets}
    assert {name for name, python in pythons.items() if python == "3.12"} == {
        "megatron-0.17",
        "megatron-0.18",
        "megatron-0.19",
    }, "every release from 0.17 declares Requires-Python >=3.12"
    assert "packaging" in matrix.target("megatron-0.13").extra_packages
    assert matrix.target("megatron-0.16").provider.calls["plain"] == (
        "pre_process",
        "post_process",
        "config",
        "pg_collection",
    )


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (one_target(flavour="x"), "target 'megatron-0.13': key 'flavour': unknown key"),
        (one_target(torch=None), "target 'megatron-0.13': key 'torch': missing required key"),
        (
            one_target(torch="=2.13.0"),
            "target 'megatron-0.13': key 'torch': '=2.13.0' is not a valid version specifier",
        ),
        (one_target(numpy="< two"), "target 'megatron-0.13': key 'numpy'"),
        (
            one_target(megatron={"pypi": "megatron-core"}),
            "key 'megatron.pypi': 'megatron-core' has no version specifier",
        ),
        (one_target(megatron={"pypi": "megatron-core==0.13.1", "wheel": "x.whl"}), "key 'megatron': needs exactly one"),
        (one_target(megatron={"wheel": "nowhere.whl"}), "key 'megatron.wheel'"),
        (one_target(megatron={"tree": "/"}), "key 'megatron.tree'"),
        (
            one_target(megatron={"git": "https://x/y.git"}),
            "key 'megatron.git': 'https://x/y.git' must start with git+https://",
        ),
        (one_target(session="mcore-13"), "key 'session': 'mcore-13' is not a session name"),
        (one_target(python=3.11), None),
        (one_target(python="3"), "key 'python'"),
        (one_target(expected_failures="/nonexistent.txt"), "key 'expected_failures': file /nonexistent.txt"),
        (one_target(provider={"calls": {"plain": ["pre_process", "post_process"]}}), "key 'provider.process_group"),
        (
            one_target(provider={"process_group_keyword": None, "calls": {"plain": ["pre_process"]}}),
            "key 'provider.calls.plain': every call shape passes pre_process and post_process",
        ),
        ({"targets": []}, "key 'targets' must be a non-empty list"),
        ({"targets": [], "defaults": {}}, "key 'defaults': unknown key (allowed: targets)"),
        ({"target": []}, "key 'target': unknown key (allowed: targets)"),
        ({}, "key 'targets': missing required key"),
    ],
)
def test_malformed_entry_names_target_and_key(tmp_path: Path, document: Any, expected: str | None) -> None:
    path = write_matrix(tmp_path, document)
    if expected is None:
        assert load_matrix(path).targets[0].python == "3.11"
        return
    with pytest.raises(MatrixError) as excinfo:
        load_matrix(path)
    message = str(excinfo.value)
    assert expected in message and "\n" not in message


def test_duplicate_session_is_rejected(tmp_path: Path) -> None:
    document = one_target()
    document["targets"].append(copy.deepcopy(document["targets"][0]))
    with pytest.raises(MatrixError, match=r"target 'megatron-0\.13': key 'session': duplicate session name"):
        load_matrix(write_matrix(tmp_path, document))


def test_nox_reports_a_malformed_matrix_in_one_line(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, one_target(torch="=2.13.0"))
    completed = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"],
        env={**_environ(), "MEGATRON_CONFORMANCE_MATRIX": str(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert lines == [
        f"megatron-conformance: {path}: target 'megatron-0.13': key 'torch': '=2.13.0' is not a valid version specifier"
    ]


def test_nox_lists_every_session_with_a_description() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"],
        env=_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    listed = dict(
        line[2:].split(" -> ", 1)
        for line in completed.stdout.splitlines()
        if line[:2] in ("* ", "- ") and " -> " in line
    )
    listed = {name.split(" [")[0]: description for name, description in listed.items()}
    for name in (*(t.session for t in load_matrix(ROOT / "matrix.yaml").targets), "tests", "lint", "candidate"):
        assert listed.get(name), f"session {name} missing or without description in nox -l: {completed.stdout}"
    assert "* megatron-0.13" in completed.stdout and "* megatron-0.15" in completed.stdout, "default targets"


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "MEGATRON_CONFORMANCE_MATRIX"}


@pytest.mark.parametrize(
    ("envdir", "hashed"),
    [
        (Path("/w/fw/.nox/megatron-conformance"), False),
        (Path("/home/someone/src/" + "deep-" * 8 + "/.nox/megatron-conformance"), True),
        (Path("/home/someone/src/" + "deeper-" * 12 + "/.nox/megatron-conformance"), False),
    ],
    ids=["short", "deep", "too-deep-to-hash"],
)
def test_venv_python_is_where_nox_puts_the_venv(envdir: Path, hashed: bool) -> None:
    """nox hashes a venv's name where its interpreter's path would be too long: a gate whose venvs live deep in a
    framework's checkout must still find them (api-diff, candidate, bench)."""
    from nox.sessions import _normalize_path

    for session in ("megatron-0.15", "megatron-candidate", "Odd name.1"):
        expected = Path(_normalize_path(str(envdir), session)) / "bin" / "python"
        assert venv_python(envdir, session) == expected
    assert (venv_python(envdir, "megatron-0.15").parent.parent.name != "megatron-0-15") == hashed
