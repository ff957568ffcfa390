"""The scale estimate's words and tables, without Megatron: the ``[scale]`` table of a declaration (every mistake one
line naming the key), the three verdicts and the cells that say them, the ``scale`` session's table and the report's
findings row per model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.formats.scale_findings import CHANGES_NOTHING, NO_PATCH, cell_text, finding, row_label, verdict_text
from harness.plugin.scale_estimate import measure_in_target
from harness.reports.findings import findings_table
from harness.reports.markdown import render_markdown
from harness.reports.results import collect
from harness.reports.scale_table import scale_markdown
from tests.report_helpers import findings, junit_document, matrix_targets, summary, write_target

UPSTREAM = "_allreduce_non_tensor_model_parallel_grads"
CELL = "5 MiB in one buffer, the subject's at most 4 MiB (budget 4 MiB)"
LLAMA = {
    "model": "llama-70b",
    "megatron": "0.15.3",
    "layout": "TP 8 + SP",
    "reductions": [
        {
            "name": UPSTREAM,
            "upstream_bytes": 5275648,
            "upstream_collectives": 1,
            "subject_bytes": 4194304,
            "subject_buffer": 4194304,
            "subject_collectives": 2,
        }
    ],
    "not_reached": ["_allreduce_conditional_embedding_grads"],
    "ignored": [],
    "budget": 4194304,
    "budget_source": "declared in [scale]",
}


def result(**changes: object) -> dict:
    found = {**LLAMA, **changes}
    return {**found, "verdict": verdict_text(found["reductions"], found["budget"])}


def test_the_three_verdicts() -> None:
    assert verdict_text([], 1 << 30) == NO_PATCH
    sent_whole = [
        {**LLAMA["reductions"][0], "subject_bytes": 5275648, "subject_buffer": 5275648, "subject_collectives": 1}
    ]
    assert verdict_text(sent_whole, 1 << 30) == CHANGES_NOTHING
    unmeasured = [{"name": UPSTREAM, "upstream_bytes": 5275648}]
    assert verdict_text(unmeasured, 1 << 30) == CHANGES_NOTHING
    assert verdict_text(LLAMA["reductions"], 4194304) == (
        f"upstream coalesces 5,275,648 B (5 MiB) in one buffer ({UPSTREAM}); your budget holds 4,194,304 B (4 MiB), "
        "and the subject's largest buffer is 4,194,304 B (4 MiB)"
    )


def test_a_finding_says_the_figures_and_its_cell_the_verdict() -> None:
    text = finding(result())
    assert text.startswith("megatron-core 0.15.3, at scale (llama-70b, TP 8 + SP): upstream coalesces 5,275,648 B")
    assert f"{UPSTREAM} flattens 5,275,648 B (5 MiB) in 1 collective, the subject's largest buffer 4,194,304 B" in text
    assert (
        "budget 4,194,304 B (4 MiB) (declared in [scale]); not reached: _allreduce_conditional_embedding_grads" in text
    )
    assert cell_text(text) == CELL
    assert row_label(text) == "at scale: llama-70b (TP 8 + SP)"
    assert cell_text(finding(result(reductions=[]))) == "no coalesced reduction: not needed"
    broken = finding({"model": "deepseek-v3", "megatron": "0.13.1", "layout": "TP 8 + SP", "error": "boom"})
    assert cell_text(broken) == "not measured (see the notes)" and row_label(broken) is not None
    assert row_label("megatron-core 0.15.3, real step (GPTModel TP 2 + SP, world 2, gloo): peak 896 bytes") is None


def test_the_session_table_has_a_row_per_model_and_reduction() -> None:
    table = scale_markdown({"megatron-0.13": [result()], "megatron-0.15": [result(megatron="0.15.3")]})
    rows = table.splitlines()
    assert rows[0] == "| model / coalesced reduction | megatron-0.13 | megatron-0.15 |"
    assert rows[2].startswith(
        "| **llama-70b** (TP 8 + SP) | 5 MiB in one buffer, the subject's at most 4 MiB (budget 4 MiB) |"
    )
    assert rows[3] == (
        f"| &nbsp;&nbsp;`{UPSTREAM}` | 5,275,648 B (5 MiB) in 1; subject: buffer 4 MiB, 2 messages | "
        "5,275,648 B (5 MiB) in 1; subject: buffer 4 MiB, 2 messages |"
    )
    assert "- megatron-0.13, megatron-0.15: not reached: _allreduce_conditional_embedding_grads" in table


def test_the_report_has_a_row_per_declared_model(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    broken = {
        "model": "deepseek-v3",
        "megatron": "0.15.3",
        "layout": "TP 8 + SP, EP 32",
        "error": "NotImplementedError",
    }
    records = [{"family": "scale", "text": finding(result())}, {"family": "scale", "text": finding(broken)}]
    write_target(reports, "megatron-0.15", summary("megatron-0.15", findings=records), junit_document([]))
    grid = collect(reports, {"megatron-0.15": matrix_targets()["megatron-0.15"]})
    assert findings_table(grid.targets) is not None
    _, rows = findings(render_markdown(grid))
    assert rows["at scale: llama-70b (TP 8 + SP)"] == [
        "5 MiB in one buffer, the subject's at most 4 MiB (budget 4 MiB)"
    ]
    assert rows["at scale: deepseek-v3 (TP 8 + SP, EP 32)"] == ["not measured (see the notes)"]
    assert "- megatron-0.15: scale: megatron-core 0.15.3, at scale (deepseek-v3" in render_markdown(grid)


@pytest.mark.parametrize("python", [sys.executable, None], ids=["interpreter", "fork"])
def test_a_measurement_that_cannot_run_is_a_line_per_model_never_silence(python: str | None) -> None:
    """This interpreter has no Megatron: the measuring interpreter, or the process forked from this one's fork server,
    fails, and every model says why."""
    request = {"models": [{"preset": "llama-8b", "tp": 2}, {"name": "mine", "fields": {}}], "subject": None}
    results = measure_in_target(request, python)
    assert [r["model"] for r in results] == ["llama-8b", "mine"]
    assert all("No module named 'megatron'" in r["error"] for r in results), results
    assert cell_text(finding(results[0])) == "not measured (see the notes)"
