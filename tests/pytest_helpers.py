"""Running the gate's cases inside a real target venv from the harness's tests, and reading what they reported.

The proof that the gate bites is a real run: the target's own interpreter, real Megatron, the seeded subject named
through the same ``--subject`` option a downstream uses, and the verdict read back from the JUnit file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.sensitivity.mutation import case_command
from harness.targets.matrix import venv_python

ROOT = Path(__file__).resolve().parent.parent
SEEDED = Path(__file__).resolve().parent / "seeded"


def target_python(session: str) -> Path:
    """The interpreter of ``session``'s nox venv; the test fails (not skips) when it has not been built."""
    python = venv_python(ROOT, session)
    if not python.exists():
        pytest.fail(f"target venv for {session} is missing ({python}); build it with: nox -s {session}")
    return python


def download_megatron_wheel(version: str, directory: Path) -> Path:
    """The megatron-core wheel of ``version`` from the package index, fetched with this interpreter's pip (target
    venvs built by uv have none)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(directory)]
    subprocess.run([*command, f"megatron-core=={version}"], check=True, timeout=600)
    return next(directory.glob("megatron_core-*.whl"))


@dataclass
class CaseRun:
    """Outcome of one pytest run of cases: exit code, full output, and per-test verdicts from JUnit."""

    returncode: int
    output: str
    verdicts: dict[str, tuple[str, str]]

    def failed(self) -> dict[str, str]:
        """Test ids that failed or errored, with their failure text."""
        return {name: text for name, (verdict, text) in self.verdicts.items() if verdict in ("failure", "error")}

    def require_red(self, label: str) -> dict[str, str]:
        """The failures of a run that must have gone red through failing cases (exit 1), not through a usage error."""
        assert self.returncode == 1, f"{label}: expected a red run, got exit {self.returncode}\n{self.output[-3000:]}"
        return self.failed()


def run_cases(
    session: str,
    selection: list[str],
    tmp_path: Path,
    subject: Path | str | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> CaseRun:
    """Run ``selection`` (paths or node ids under cases/) in ``session``'s venv and collect the verdicts."""
    junit = tmp_path / "junit.xml"
    options = [*(extra or []), *([f"--subject={subject}"] if subject is not None else [])]
    command = case_command(target_python(session), session, selection, tmp_path, junit, "ci", options)
    completed = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CaseRun(completed.returncode, completed.stdout + completed.stderr, _verdicts(junit))


def _verdicts(junit: Path) -> dict[str, tuple[str, str]]:
    if not junit.exists():
        return {}
    verdicts: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        verdict, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                verdict, text = child.tag, (child.get("message", "") + "\n" + (child.text or ""))
                break
        verdicts[name] = (verdict, text)
    return verdicts
