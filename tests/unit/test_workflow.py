"""The GitHub workflow users copy: valid against the workflow schema, jobs wired through their outputs, and its
listing step, run as written, yields this noxfile's four target sessions.

The workflow cannot run here; the schema (vendored in check-jsonschema, so no network) catches unknown keys and wrong
shapes, and the structural checks catch what a schema cannot: an output, need or matrix key that is never produced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pytest_helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "megatron-gate.yml"
SHIPPED = yaml.safe_load((ROOT / "matrix.yaml").read_text())["targets"]
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _step(job: dict[str, Any], predicate: Any) -> dict[str, Any]:
    matches = [step for step in job["steps"] if predicate(step)]
    assert len(matches) == 1, f"expected one matching step, found {len(matches)}"
    return matches[0]


def _uses(action: str) -> Any:
    return lambda step: step.get("uses", "").split("@")[0] == action


def _runs(command: str) -> Any:
    return lambda step: command in step.get("run", "")


def _environment(**extra: str) -> dict[str, str]:
    """This interpreter's bin first on PATH: ``nox`` and ``python`` there, as after the workflow's pip install."""
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]), **extra}


def test_valid_against_the_github_workflow_schema() -> None:
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.fail("check-jsonschema is missing from this venv: pip install check-jsonschema")
    completed = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_jobs_are_wired_listing_to_matrix_to_report(workflow: dict[Any, Any]) -> None:
    jobs = workflow["jobs"]
    assert list(jobs) == ["targets", "gate", "report"]
    listing, gate, report = jobs["targets"], jobs["gate"], jobs["report"]

    _step(listing, _runs('pip install "nox[uv]"'))
    list_step = _step(listing, _runs("nox -l --json -t targets"))
    assert listing["outputs"]["sessions"] == f"${{{{ steps.{list_step['id']}.outputs.sessions }}}}"

    assert gate["needs"] == "targets"
    assert gate["strategy"]["fail-fast"] is False
    assert gate["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.targets.outputs.sessions) }}"}
    _step(gate, _runs('pip install "nox[uv]"'))
    assert _step(gate, _runs("nox -s"))["run"] == 'nox -s "${{ matrix.session }}"'
    assert _step(gate, _uses("actions/setup-python"))["with"]["python-version"] == "${{ matrix.python }}"
    upload = _step(gate, _uses("actions/upload-artifact"))
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "reports/" and upload["with"]["name"] == "reports-${{ matrix.session }}"

    assert report["needs"] == ["targets", "gate"] and report["if"] == "always()"
    assert report["permissions"]["pull-requests"] == "write"
    download = _step(report, _uses("actions/download-artifact"))
    assert download["with"] == {"pattern": "reports-*", "merge-multiple": True, "path": "reports"}
    names = [step.get("run") or step.get("uses", "").split("@")[0] for step in report["steps"]]
    assert names.index("nox -s report") > names.index("actions/download-artifact")
    summary = _step(report, _runs("GITHUB_STEP_SUMMARY"))
    assert summary["if"] == "always()" and "reports/compatibility.md" in summary["run"]
    comment = _step(report, _uses("marocchino/sticky-pull-request-comment"))
    assert comment["if"].startswith("github.event_name == 'pull_request'")
    assert comment["with"]["path"] == "reports/compatibility.md"


def test_every_expression_names_something_that_exists(workflow: dict[Any, Any]) -> None:
    jobs = workflow["jobs"]
    for name, job in jobs.items():
        text = yaml.safe_dump(job)
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        for expression in EXPRESSION.findall(text):
            for need, output in re.findall(r"needs\.([\w-]+)\.outputs\.([\w-]+)", expression):
                assert need in needs, f"job {name} reads needs.{need} without needing it"
                assert output in jobs[need].get("outputs", {}), f"job {need} has no output {output}"
            for step_id in re.findall(r"steps\.([\w-]+)\.outputs", expression):
                assert step_id in [step.get("id") for step in job["steps"]], f"job {name}: no step {step_id}"
            for key in re.findall(r"matrix\.([\w-]+)", expression):
                assert key in ("session", "python"), f"job {name}: the listing gives no matrix key {key}"


def test_listing_step_as_written_yields_every_target_with_its_python(workflow: dict[Any, Any], tmp_path: Path) -> None:
    script = _step(workflow["jobs"]["targets"], _runs("nox -l --json -t targets"))["run"]
    output = tmp_path / "github_output"
    completed = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=ROOT,
        env=_environment(GITHUB_OUTPUT=str(output)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    name, _, value = output.read_text().strip().partition("=")
    assert name == "sessions"
    assert json.loads(value) == [{"session": entry["session"], "python": entry["python"]} for entry in SHIPPED]


def test_summary_step_appends_the_markdown_report(workflow: dict[Any, Any], tmp_path: Path) -> None:
    script = _step(workflow["jobs"]["report"], _runs("GITHUB_STEP_SUMMARY"))["run"]
    summary = tmp_path / "step_summary"
    summary.write_text("earlier\n")
    completed = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=_environment(GITHUB_STEP_SUMMARY=str(summary))
    )
    assert completed.returncode == 0 and summary.read_text() == "earlier\n"
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "compatibility.md").write_text("## Megatron compatibility\n")
    subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=_environment(GITHUB_STEP_SUMMARY=str(summary)), check=True
    )
    assert summary.read_text() == "earlier\n## Megatron compatibility\n"
