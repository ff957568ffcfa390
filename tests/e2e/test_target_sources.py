"""Targets that name a local wheel or a local source tree install and pass the smoke case; a bad pin fails clearly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from tests.pytest_helpers import ROOT, download_megatron_wheel

MEGATRON_VERSION = "0.15.3"


def _entry(session: str, megatron: dict[str, str]) -> dict[str, object]:
    return {
        "session": session,
        "megatron": megatron,
        "python": "3.11",
        "torch": "==2.13.0",
        "numpy": "<2",
        "expected_failures": str(ROOT / "cases/expected_failures/megatron-0.15.txt"),
        "provider": {"process_group_keyword": "pg_collection", "calls": {"plain": ["pre_process", "post_process"]}},
    }


def _run_nox(tmp_path: Path, targets: list[dict[str, object]], sessions: list[str]) -> subprocess.CompletedProcess:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"targets": targets}))
    env = {
        **os.environ,
        "MEGATRON_CONFORMANCE_MATRIX": str(matrix),
        "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path / "reports"),
    }
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs")]
    command += ["-s", *sessions, "--", "cases/test_smoke.py"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def _tree_from_wheel(wheel: Path, tree: Path) -> Path:
    """A local source tree holding the wheel's package files and a minimal setuptools project."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree, [n for n in archive.namelist() if n.startswith("megatron/")])
    (tree / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=61']\nbuild-backend = 'setuptools.build_meta'\n"
        f"[project]\nname = 'megatron-core'\nversion = '{MEGATRON_VERSION}'\n"
        "dependencies = ['torch', 'numpy<2', 'packaging']\n"
        "[tool.setuptools.packages.find]\ninclude = ['megatron*']\n"
        "[tool.setuptools.package-data]\n'*' = ['*']\n"
    )
    return tree


def test_local_wheel_and_local_tree_targets_pass_smoke(tmp_path: Path) -> None:
    wheel = download_megatron_wheel(MEGATRON_VERSION, tmp_path / "wheels")
    tree = _tree_from_wheel(wheel, tmp_path / "tree")
    targets = [
        _entry("megatron-wheel", {"wheel": str(wheel), "version": f"=={MEGATRON_VERSION}"}),
        _entry("megatron-tree", {"tree": str(tree), "version": f"=={MEGATRON_VERSION}"}),
    ]
    completed = _run_nox(tmp_path, targets, ["megatron-wheel", "megatron-tree"])
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    for session, origin in (("megatron-wheel", wheel), ("megatron-tree", tree)):
        summary = json.loads((tmp_path / "reports" / session / "summary.json").read_text())
        assert summary["counts"]["passed"] == 3 and summary["counts"]["failed"] == 0, summary
        assert summary["installed"]["megatron-core"] == MEGATRON_VERSION
        assert summary["megatron_origin"] == str(origin)


def test_uninstallable_pin_ends_with_one_clear_line(tmp_path: Path) -> None:
    targets = [_entry("megatron-bogus", {"pypi": "megatron-core==0.0.999"})]
    completed = _run_nox(tmp_path, targets, ["megatron-bogus"])
    assert completed.returncode != 0
    output = completed.stdout + completed.stderr
    assert re.search(
        r"target megatron-bogus: could not install its pins \((uv )?pip install .*megatron-core==0\.0\.999", output
    ), output[-4000:]
