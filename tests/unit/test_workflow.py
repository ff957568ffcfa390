"""The GitHub workflows: the one users copy and the reusable one a framework calls. Both valid against the workflow
schema, jobs wired through their outputs, and their listing steps, run as written, yield this noxfile's targets (the
reusable one through the installed command, narrowed to the targets the caller names); the caller the README shows
fits in ten lines and gives every input the workflow requires.

The workflow cannot run here; the schema (vendored in check-jsonschema, so no network) catches unknown keys and wrong
shapes, and the structural checks catch what a schema cannot: an output, need or matrix key that is never produced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pytest_helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "megatron-gate.yml"
REUSABLE = ROOT / ".github" / "workflows" / "megatron-conformance.yml"
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


@pytest.fixture(scope="module")
def reusable() -> dict[Any, Any]:
    return yaml.safe_load(REUSABLE.read_text())


@pytest.mark.parametrize("path", [WORKFLOW, REUSABLE], ids=lambda path: path.name)
def test_valid_against_the_github_workflow_schema(path: Path) -> None:
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.fail("check-jsonschema is missing from this venv: pip install check-jsonschema")
    completed = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
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


@pytest.mark.parametrize("path", [WORKFLOW, REUSABLE], ids=lambda path: path.name)
def test_every_expression_names_something_that_exists(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    jobs = document["jobs"]
    inputs = document.get(True, document.get("on", {})).get("workflow_call", {}) or {}
    for expression in EXPRESSION.findall(yaml.safe_dump(document)):
        for name in re.findall(r"inputs\.([\w-]+)", expression):
            assert name in inputs.get("inputs", {}), f"{path.name} reads inputs.{name}, which it does not declare"
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


def _command_shim(directory: Path) -> Path:
    """A ``megatron-conformance`` on PATH that is this checkout's command, as ``pip install "$GATE"`` leaves one."""
    directory.mkdir()
    shim = directory / "megatron-conformance"
    python, root = shlex.quote(sys.executable), shlex.quote(str(ROOT))
    shim.write_text(f'#!/usr/bin/env bash\nPYTHONPATH={root} exec {python} -m harness.launch.command "$@"\n')
    shim.chmod(0o755)
    return directory


def test_reusable_jobs_install_the_named_gate_and_run_its_command(reusable: dict[Any, Any]) -> None:
    inputs = reusable[True]["workflow_call"]["inputs"]
    assert {name for name, spec in inputs.items() if spec.get("required")} == {"gate-repository", "gate-version"}
    assert inputs["declaration"]["default"] == "pyproject.toml" and inputs["targets"]["default"] == ""
    gate_source = "git+https://github.com/${{ inputs.gate-repository }}@${{ inputs.gate-version }}"
    assert reusable["env"]["GATE"] == f"megatron-conformance @ {gate_source}"
    jobs = reusable["jobs"]
    assert list(jobs) == ["targets", "gate", "report"]
    for job in jobs.values():
        _step(job, _runs('pip install "$GATE"'))
    gate = jobs["gate"]
    assert gate["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.targets.outputs.sessions) }}"}
    _step(gate, _uses("actions/checkout"))
    run = _step(gate, _runs("megatron-conformance --subject"))
    assert run["run"] == 'megatron-conformance --subject "$DECLARATION" -s "$SESSION"'
    assert run["env"] == {"DECLARATION": "${{ inputs.declaration }}", "SESSION": "${{ matrix.session }}"}
    assert _step(gate, _uses("actions/upload-artifact"))["with"]["name"] == "reports-${{ matrix.session }}"
    report = jobs["report"]
    names = [step.get("run") or step.get("uses", "").split("@")[0] for step in report["steps"]]
    reporting = 'megatron-conformance --subject "$DECLARATION" -s report -- $TARGETS'
    assert names.index(reporting) > names.index("actions/download-artifact")
    assert _step(report, _runs(reporting))["env"]["TARGETS"] == "${{ inputs.targets }}"
    assert report["permissions"]["pull-requests"] == "write"


@pytest.mark.parametrize(
    ("asked", "expected"),
    [("", [t["session"] for t in SHIPPED]), ("megatron-0.19 megatron-0.15", ["megatron-0.19", "megatron-0.15"])],
    ids=["every-target", "two-named"],
)
def test_reusable_listing_yields_the_targets_asked_for(
    reusable: dict[Any, Any], tmp_path: Path, asked: str, expected: list[str]
) -> None:
    script = _step(reusable["jobs"]["targets"], _runs("megatron-conformance -l --json"))["run"]
    output = tmp_path / "github_output"
    shims = _command_shim(tmp_path / "bin")
    env = _environment(GITHUB_OUTPUT=str(output), TARGETS=asked)
    env["PATH"] = os.pathsep.join([str(shims), env["PATH"]])
    completed = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    name, _, value = output.read_text().strip().partition("=")
    python = {entry["session"]: entry["python"] for entry in SHIPPED}
    assert name == "sessions" and json.loads(value) == [{"session": s, "python": python[s]} for s in expected]


def test_reusable_listing_refuses_a_target_the_gate_does_not_have(reusable: dict[Any, Any], tmp_path: Path) -> None:
    script = _step(reusable["jobs"]["targets"], _runs("megatron-conformance -l --json"))["run"]
    env = _environment(GITHUB_OUTPUT=str(tmp_path / "out"), TARGETS="megatron-0.15 megatron-9.9")
    env["PATH"] = os.pathsep.join([str(_command_shim(tmp_path / "bin")), env["PATH"]])
    completed = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode != 0
    assert "no target named ['megatron-9.9'] in the gate" in completed.stderr
    assert not (tmp_path / "out").exists()


def test_the_readme_caller_fits_in_ten_lines_and_gives_every_required_input(reusable: dict[Any, Any]) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    callers = [block for block in blocks if "/.github/workflows/megatron-conformance.yml@" in block]
    assert len(callers) == 1, "README.md shows one caller of the reusable workflow"
    caller = callers[0]
    assert len(caller.strip().splitlines()) <= 10, caller
    job = next(iter(yaml.safe_load(caller)["jobs"].values()))
    inputs = reusable[True]["workflow_call"]["inputs"]
    required = {name for name, spec in inputs.items() if spec.get("required")}
    assert required <= set(job["with"]) <= set(inputs)
    assert job["uses"].split("@")[1] == job["with"]["gate-version"]
    assert job["permissions"]["pull-requests"] == "write"


PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _third_party_uses(document: dict[Any, Any]) -> list[str]:
    """Every ``uses:`` of a step that names another repository's action (not a local one, not the gate's own
    reusable workflow, which callers name by the gate's version)."""
    return [
        step["uses"]
        for job in document["jobs"].values()
        for step in job.get("steps", [])
        if "uses" in step and not step["uses"].startswith("./")
    ]


@pytest.mark.parametrize("path", [WORKFLOW, REUSABLE], ids=lambda p: p.name)
def test_every_third_party_action_is_pinned_by_commit_with_its_tag_beside_it(path: Path) -> None:
    """A tag can be moved to other code; a commit cannot. The tag the commit was read from stays in a comment."""
    uses = _third_party_uses(yaml.safe_load(path.read_text()))
    assert uses and all(PINNED.match(value) for value in uses), [u for u in uses if not PINNED.match(u)]
    lines = [line for line in path.read_text().splitlines() if re.search(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40}", line)]
    assert lines and all(re.search(r"  # v\d", line) for line in lines), lines


def test_a_third_party_action_named_by_tag_is_caught() -> None:
    moved = {"jobs": {"gate": {"steps": [{"uses": "actions/checkout@v4"}, {"uses": "./local"}]}}}
    assert [u for u in _third_party_uses(moved) if not PINNED.match(u)] == ["actions/checkout@v4"]


def _early_warning_example() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "ci.md").read_text(), re.DOTALL)
    examples = [block for block in blocks if "schedule:" in block]
    assert len(examples) == 1, "docs/ci.md shows one scheduled caller"
    return examples[0]


@pytest.fixture(scope="module")
def early_warning() -> dict[Any, Any]:
    return yaml.safe_load(_early_warning_example())


def test_the_weekly_example_is_valid_against_the_workflow_schema(tmp_path: Path) -> None:
    path = tmp_path / "megatron-early-warning.yml"
    path.write_text(_early_warning_example())
    test_valid_against_the_github_workflow_schema(path)
    test_every_third_party_action_is_pinned_by_commit_with_its_tag_beside_it(path)


def test_the_weekly_example_runs_latest_weekly_and_reports_where_no_pull_request_is(
    early_warning: dict[Any, Any],
) -> None:
    [cron] = [entry["cron"] for entry in early_warning[True]["schedule"]]
    _minute, _hour, day, month, weekday = cron.split()
    assert day == month == "*" and weekday.isdigit(), f"{cron} is not once a week"
    assert early_warning["permissions"]["issues"] == "write"
    job = next(iter(early_warning["jobs"].values()))
    pythons = _step(job, _uses("actions/setup-python"))["with"]["python-version"].split()
    assert sorted(pythons) == sorted({t["python"] for t in SHIPPED}), "every Python of the matrix is set up"
    run = _step(job, _runs("-s candidate -- latest"))
    assert "--subject" in run["run"]
    summary = _step(job, _runs("GITHUB_STEP_SUMMARY"))
    assert summary["if"] == "${{ !cancelled() }}"
    assert "reports/candidate-latest/early-warning.md" in summary["run"]
    issue = _step(job, _runs("gh issue"))
    assert issue["if"] == "${{ failure() }}"


@pytest.mark.parametrize(("open_issue", "expected"), [("", "issue create --title"), ("7", "issue comment 7 --body")])
def test_the_weekly_issue_step_as_written_opens_one_issue_or_comments_on_it(
    early_warning: dict[Any, Any], tmp_path: Path, open_issue: str, expected: str
) -> None:
    """The step's shell, run with a stand-in ``gh`` that answers the issue search and records what it is asked."""
    job = next(iter(early_warning["jobs"].values()))
    step = _step(job, _runs("gh issue"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    gh = bin_dir / "gh"
    record = f'printf "%s " "$@" | tr "\\n" " " >> {calls}; echo >> {calls}'
    gh.write_text(f'#!/bin/sh\n{record}\nif [ "$1 $2" = "issue list" ]; then echo "{open_issue}"; fi\n')
    gh.chmod(0o755)
    report = tmp_path / "reports" / "candidate-latest" / "early-warning.md"
    report.parent.mkdir(parents=True)
    report.write_text("## Early warning on Python 3.12: megatron-core 0.20.0rc0 against 0.19.2\n")
    environment = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RUN_URL": "https://run/1"}
    completed = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr
    said = calls.read_text().splitlines()
    assert said[0].startswith("issue list --state open --search")
    assert len(said) == 2 and said[1].startswith(expected), said
    assert "https://run/1" in said[1] and "0.20.0rc0 against 0.19.2" in said[1]
