"""The formats written by one side of the gate and read by another: each read gives back what was written, and a
file from an older gate still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.formats.environment import (
    DEFAULT_MATRIX,
    MATRIX_ENV_VAR,
    REFERENCE_SUBJECT,
    SUBJECT_ENV_VAR,
    repro_environment,
)
from harness.formats.not_declared import is_not_declared, not_declared_reason
from harness.formats.summary import SessionSummary, SummaryError, read_summary
from harness.plugin.failure import contract_failure, one_line, parse_head
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT

TARGET = load_matrix(ROOT / "matrix.yaml").target("megatron-0.15")


def test_a_summary_reads_back_as_written(tmp_path: Path) -> None:
    written = SessionSummary(
        target="megatron-0.15",
        subject="tests/frameworks/kestrel/megatron-conformance.toml",
        subject_kind="declaration",
        matrix="/x/matrix.yaml",
        counts={"passed": 3},
        findings=[{"family": "equivalence", "text": "upstream coalesces"}],
        exit_status=1,
        family_seconds={"equivalence": 1.5},
    )
    assert read_summary(written.write(tmp_path)) == written
    assert read_summary(tmp_path) == written


def test_an_older_summary_reads_with_defaults_and_a_newer_ones_keys_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"target": "megatron-0.13", "exit_status": 0, "later": 1}))
    summary = read_summary(tmp_path)
    assert (summary.target, summary.subject, summary.subject_kind, summary.matrix) == (
        "megatron-0.13",
        None,
        "module",
        None,
    )
    assert summary.waivers == summary.advisories == summary.findings == []


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_summary_that_is_no_json_object_is_an_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(SummaryError):
        read_summary(tmp_path)


def test_a_repro_environment_names_only_what_differs_from_the_defaults(tmp_path: Path) -> None:
    assert repro_environment(REFERENCE_SUBJECT, DEFAULT_MATRIX) == {}
    assert repro_environment(None, None) == {}
    candidate = tmp_path / "matrix.yaml"
    assert repro_environment("a.toml", candidate) == {SUBJECT_ENV_VAR: "a.toml", MATRIX_ENV_VAR: str(candidate)}


def test_a_not_declared_reason_is_recognised_and_nothing_else_is() -> None:
    reason = not_declared_reason("equivalence", "patch", Path("/f/megatron-conformance.toml"))
    assert reason == "not declared: equivalence needs [patch] in /f/megatron-conformance.toml"
    assert is_not_declared(reason)
    assert not is_not_declared("no CUDA/NCCL in this torch build")


def test_the_head_of_a_contract_failure_reads_back() -> None:
    message = contract_failure(TARGET, "chunk-splitting", "property 'partition' violated", ["a", "b"])
    assert parse_head(message) == ("megatron-0.15", "chunk-splitting")
    assert parse_head("assert 1 == 2") is None
    assert parse_head("[megatron-0.15]chunk-splitting: no space") is None


def test_one_line_keeps_the_head_and_its_first_detail() -> None:
    message = contract_failure(TARGET, "model-provider", "keywords", ["keyword 'config' dropped", "more"])
    assert one_line(f"AssertionError: {message}\nassert False") == (
        "[megatron-0.15] model-provider: keywords: keyword 'config' dropped"
    )
    assert one_line("Failed: [megatron-0.15] equivalence: ops differ") == "[megatron-0.15] equivalence: ops differ"
    assert one_line("") == "advisory property"
