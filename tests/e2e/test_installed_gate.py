"""The gate installed into a framework's own repository, as a user installs it: a scratch repository outside the
checkout lists the gate among its development requirements, ``pip install -r`` builds it from this checkout (the same
build a ``git+https://`` URL goes through), and its ``megatron-conformance`` command runs one target with the subject
declared in ``[tool.megatron-conformance]`` of the repository's ``pyproject.toml``.

Green as written; red once the repository's splitter ignores its budget, with a repro line that replays the red from
the repository; the reports land in the repository's ``reports/`` and the venvs in its ``.nox/``, never in the
installed gate.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.targets.matrix import venv_python
from tests.pytest_helpers import ROOT, on_one_target

FRAMEWORK = ROOT / "tests" / "frameworks" / "modernrl"
TARGETS = on_one_target(["megatron-0.15", "megatron-0.19"], kept=["megatron-0.15"])
"""0.19 needs Python 3.12, which the installed command must find on its own, as the checkout's noxfile does."""
SPLITTER = Path("modernrl/backends/megatron_utils/grad_chunking.py")
BUDGET_CHECK = "filled + nbytes > chunk_bytes"


def _pyproject(declaration: str) -> str:
    """The framework's pyproject.toml with its declaration moved under ``[tool.megatron-conformance]``."""
    lines = ["[project]", 'name = "modernrl"', 'version = "0.1.0"', "", "[tool.megatron-conformance]"]
    for line in declaration.splitlines():
        lines.append(f"[tool.megatron-conformance.{line[1:]}" if line.startswith("[") else line)
    return "\n".join(lines) + "\n"


def _environment(repository: Path) -> dict[str, str]:
    """A user's shell: the repository's venv first on PATH, nothing of this test session's gate settings."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("MEGATRON_CONFORMANCE_", "VIRTUAL_ENV", "NOX"))}
    return {**kept, "PATH": os.pathsep.join([str(repository / ".venv" / "bin"), kept["PATH"]])}


def _run(repository: Path, command: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=repository,
        env=_environment(repository),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A framework repository with the gate installed in its venv from its development requirements."""
    root = tmp_path_factory.mktemp("framework") / "modernrl"
    shutil.copytree(FRAMEWORK / "modernrl", root / "modernrl")
    (root / "pyproject.toml").write_text(_pyproject((FRAMEWORK / "megatron-conformance.toml").read_text()))
    (root / "requirements-dev.txt").write_text(f"megatron-conformance @ {ROOT.as_uri()}\n")
    subprocess.run([sys.executable, "-m", "venv", str(root / ".venv")], check=True, timeout=300)
    installed = _run(root, "pip install -q -r requirements-dev.txt", timeout=600)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return root


def _summary(repository: Path, target: str) -> dict:
    return json.loads((repository / "reports" / target / "summary.json").read_text())


@pytest.mark.parametrize("target", TARGETS)
def test_the_installed_command_is_green_on_the_framework_as_written(repository: Path, target: str) -> None:
    run = _run(repository, f"megatron-conformance -s {target}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-5000:]
    reported = _run(repository, f"megatron-conformance -s report -- {target}")
    assert reported.returncode == 0 and "1 target, no failure." in reported.stderr, reported.stderr[-3000:]
    # The repository serves every parameter of this module: the report of one target merges that one alone.
    reports = repository / "reports"
    others = [p.name for p in reports.iterdir() if p.name.startswith("megatron-") and p.name != target]
    markdown = (reports / "compatibility.md").read_text()
    assert [name for name in others if name in markdown] == [], f"{others} merged into the report of {target}"
    summary = _summary(repository, target)
    assert summary["subject"] == str(repository / "pyproject.toml")
    assert summary["counts"]["failed"] == 0 and summary["counts"]["passed"] > 20, summary["counts"]
    assert (repository / "reports" / "compatibility.html").is_file()
    assert venv_python(repository / ".nox" / "megatron-conformance", target).exists()
    where = _run(repository, "python -c 'import megatron_conformance; print(megatron_conformance.__path__[0])'")
    installed = Path(where.stdout.strip())
    assert (installed / "noxfile.py").is_file(), where.stderr
    assert not any((installed / name).exists() for name in ("reports", ".nox", ".hypothesis"))
    listed = _run(repository, "megatron-conformance -l").stdout
    assert f"- {target} " in listed or f"* {target} " in listed
    assert "- report " in listed
    assert "- tests " not in listed and "- lint " not in listed, "the installed gate ships no tests/ to run"


def test_a_seeded_break_in_the_framework_is_red_with_a_repro_line_that_replays_it(repository: Path) -> None:
    target = "megatron-0.15"
    splitter = repository / SPLITTER
    source = splitter.read_text()
    assert BUDGET_CHECK in source
    splitter.write_text(source.replace(BUDGET_CHECK, "False"))
    try:
        run = _run(repository, f"megatron-conformance -R -s {target} -- cases/test_chunk_splitting.py")
        output = run.stdout + run.stderr
        assert run.returncode != 0, output[-5000:]
        assert _summary(repository, target)["counts"]["failed"] > 0
        repros = [line.split("repro: ", 1)[1] for line in output.splitlines() if line.startswith("repro: ")]
        assert repros, output[-5000:]
        assert f"megatron-conformance -R -s {target} -- " in repros[0]
        reported = _run(repository, f"megatron-conformance -s report -- {target}")
        assert reported.returncode == 0, reported.stdout[-3000:] + reported.stderr[-3000:]
        assert "test_chunk_splitting.py::" in (repository / "reports" / "compatibility.md").read_text()
        replay = _run(repository, repros[0])
        assert replay.returncode == 1, f"{shlex.quote(repros[0])} did not replay the red:\n{replay.stdout[-3000:]}"
    finally:
        splitter.write_text(source)
