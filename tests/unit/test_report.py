"""The compatibility report on synthetic JUnit/summary files: columns, cells, failure entries with their repro lines,
notes, the comment limit, self-contained HTML, and ``nox -s report``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.reports.results import ReportError, collect, load_target, natural_key
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT
from tests.report_helpers import (
    BLOB,
    PARTITION_MESSAGE,
    PARTITION_REPRO,
    SEEDED_SUBJECT,
    failure_entry,
    repro_of,
    summary,
    synthetic_reports,
    table,
)


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    return synthetic_reports(tmp_path / "reports")


def test_columns_are_targets_in_version_order_with_installed_pins(synthetic: Path) -> None:
    headers, _ = table(render_markdown(collect(synthetic)))
    assert [h.split("<br>")[0] for h in headers] == ["megatron-0.9", "megatron-0.13", "megatron-0.15", "megatron-0.16"]
    assert headers[1] == (
        "megatron-0.13<br><sub>megatron-core 0.13.1<br>torch 2.13.0+cpu<br>numpy 1.26.4<br>python 3.11.7</sub>"
    )
    assert "numpy 2.4.6" in headers[3]
    assert headers[0] == "megatron-0.9<br><sub>megatron-core ?<br>torch ?<br>numpy ?<br>python ?</sub>"
    assert sorted(["megatron-0.16", "megatron-0.9", "megatron-1.0"], key=natural_key)[0] == "megatron-0.9"


def test_cells_green_red_xfail_skip_with_counts(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    _, rows = table(markdown)
    chunks = "**chunk-splitting** `cases/test_chunks.py`"
    assert list(rows)[:2] == ["**all cases**", chunks]
    assert rows["**all cases**"][1] == "✅ 5 passed · ⏭️ 1 skipped"
    assert rows["**all cases**"][0] == "✅ 1 passed"
    assert rows[chunks][1] == "✅ 4 passed"
    partition = rows["&nbsp;&nbsp;&nbsp;`test_partition`"]
    assert partition == ["✅ 1 passed", "✅ 1 passed", "[❌ 1 failed](#fail-megatron-0-15-2)", "✅ 1 passed"]
    assert rows["&nbsp;&nbsp;&nbsp;`test_alignment`"][1:3] == ["✅ 1 passed", "🟡 1 xfail"]
    grouped = rows["&nbsp;&nbsp;&nbsp;`test_invalid_budget_is_a_value_error`"]
    assert grouped[1:3] == ["✅ 2 passed", "[❌ 1 failed](#fail-megatron-0-15-1) · ✅ 1 passed"]
    equivalence = rows["**equivalence** `cases/test_equivalence.py`"]
    assert equivalence == ["—", "⏭️ 1 skipped", "—", "—"]
    assert rows[chunks][2] == "[❌ 2 failed](#fail-megatron-0-15-1) · 🟡 1 xfail · ✅ 1 passed"
    assert rows["**smoke** `cases/test_smoke.py`"][2] == "[❌ 1 failed](#fail-megatron-0-15-3)"
    assert rows["**model-provider** `cases/test_provider.py`"][3] == "[❌ 1 failed](#fail-megatron-0-16-2)"
    assert rows["&nbsp;&nbsp;&nbsp;`(collection)`"][3] == "[❌ 1 failed](#fail-megatron-0-16-2)"
    assert rows["**new-api** `cases/test_future.py`"][3] == "[❌ 1 failed](#fail-megatron-0-16-1)"
    assert rows["**all cases**"][3] == "[❌ 2 failed](#fail-megatron-0-16-1) · ✅ 1 passed"


def test_failure_entry_has_message_repro_and_hypothesis_replay(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    assert markdown.index("## Failures") > markdown.index("| **all cases** |")
    entry = failure_entry(markdown, "fail-megatron-0-15-2")
    assert entry.startswith('<a id="fail-megatron-0-15-2"></a>megatron-0.15 · `cases/test_chunks.py::test_partition`')
    assert "failed · contract `chunk-splitting` · symbol `split_into_chunks`" in entry
    assert f"```text\n{PARTITION_MESSAGE}\nassert False\n```" in entry
    assert repro_of(entry) == PARTITION_REPRO
    assert f"`{BLOB}`" in entry
    example = re.search(r"<summary>Falsifying example</summary>\n\n```text\n(.*?)\n```", entry, re.DOTALL).group(1)
    assert example.splitlines() == [
        "Falsifying example: test_partition(",
        "    case=([TensorSpec(name='a', shape=(1,), dtype=torch.float32, transposed=False),",
        "      TensorSpec(name='b', shape=(1,), dtype=torch.float32, transposed=False)],",
        "     1),",
        ")",
    ]


def test_reds_without_a_repro_line_get_one_built_from_the_summary(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    xpass = failure_entry(markdown, "fail-megatron-0-15-1")
    assert xpass.startswith('<a id="fail-megatron-0-15-1"></a>megatron-0.15 · `cases/test_chunks.py::test_invalid_')
    assert (
        "\npassed though listed as an expected failure (strict)\n" in xpass
        and "[XPASS(strict)] expected failure listed" in xpass
    )
    assert repro_of(xpass) == (
        f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- "
        "'cases/test_chunks.py::test_invalid_budget_is_a_value_error[x|y]'"
    )
    error = failure_entry(markdown, "fail-megatron-0-15-3")
    assert "error (setup, teardown or collection) · contract `smoke` · symbol `megatron-core`" in error
    assert repro_of(error).endswith(
        "nox -R -s megatron-0.15 -- cases/test_smoke.py::test_installed_versions_are_the_pins"
    )
    collection = failure_entry(markdown, "fail-megatron-0-16-2")
    assert repro_of(collection) == (
        "MEGATRON_CONFORMANCE_SUBJECT='tests/seeded/my adapter.py' nox -R -s megatron-0.16 -- cases/test_provider.py"
    )


def test_notes_name_missing_files_stale_expectations_and_silent_exits(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    notes = markdown[markdown.index("### Notes") : markdown.index("## Failures")]
    assert "- megatron-0.9: no summary.json" in notes and "megatron-0.9: no junit.xml" not in notes
    assert "- megatron-0.13: stale expected failure: 'cases/test_gone.py' matches no test" in notes
    assert "megatron-0.15: pytest exited" not in notes
    (synthetic / "megatron-0.13" / "summary.json").write_text(json.dumps(summary("megatron-0.13", exit_status=3)))
    (synthetic / "megatron-0.16" / "junit.xml").write_text("<testsuites><testsuite>")
    assert "pytest exited with status 3 without a failing test" in load_target(synthetic / "megatron-0.13").notes[0]
    assert load_target(synthetic / "megatron-0.16").notes[0].startswith("junit.xml is unreadable")


def test_failures_past_the_comment_limit_are_left_to_the_html_page(synthetic: Path) -> None:
    matrix = collect(synthetic)
    full = render_markdown(matrix)
    cut = render_markdown(matrix, limit=full.index("## Failures") + 2000)
    assert len(cut) < full.index("## Failures") + 2200
    assert 'id="fail-megatron-0-15-1"' in cut and 'id="fail-megatron-0-16-1"' not in cut
    assert re.search(r"\n\d+ more not shown here \(comment size limit\): see compatibility.html.\n$", cut)


def test_html_is_self_contained_and_links_every_red(synthetic: Path) -> None:
    matrix = collect(synthetic)
    page = render_html(matrix)
    assert "<script" not in page and "<link" not in page and "src=" not in page and "://" not in page
    for failure in matrix.failures:
        assert f'<section class="failure" id="{failure.anchor}">' in page
        assert f'href="#{failure.anchor}"' in page
    red_cells = re.findall(r'<td class="failed">(.*?)</td>', page)
    assert len(red_cells) == 11 and all(cell.startswith('<a href="#fail-') for cell in red_cells)
    assert '<td class="failed"><a href="#fail-megatron-0-15-2">1 failed</a></td>' in page
    assert '<td class="xfailed">1 xfail</td>' in page and '<td class="skipped">1 skipped</td>' in page


def report_session(reports: Path) -> subprocess.CompletedProcess:
    """``nox -s report`` on the reports directory ``reports``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nox", "-s", "report"],
        cwd=ROOT,
        env={**os.environ, "MEGATRON_CONFORMANCE_REPORTS": str(reports)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nothing_to_report_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "api-diff").mkdir()
    with pytest.raises(ReportError, match=r"no target session in .*run a target first"):
        collect(tmp_path)
    completed = report_session(tmp_path)
    assert completed.returncode != 0
    assert f"no target session in {tmp_path}" in completed.stdout + completed.stderr


def test_report_session_writes_both_files(synthetic: Path) -> None:
    completed = report_session(synthetic)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    sessions = [t.session for t in load_matrix(ROOT / "matrix.yaml").targets]
    assert f"{len({*sessions, 'megatron-0.9'})} targets; failures on megatron-0.15 (3), megatron-0.16 (2)." in (
        completed.stderr
    )
    headers, rows = table((synthetic / "compatibility.md").read_text())
    assert headers[2].startswith("megatron-0.14<br>") and rows["**all cases**"][2] == "—"
    expected = render_markdown(collect(synthetic, sessions))
    assert (synthetic / "compatibility.md").read_text() == expected
    assert "- megatron-0.14: not run: no reports of it here" in expected
    assert (synthetic / "compatibility.html").read_text().startswith("<!DOCTYPE html>")


def test_waivers_the_subject_declared_are_shown(synthetic: Path) -> None:
    waiver = {"kind": "env-read", "name": "SLIME_CHUNK_BYTES", "allowed_by": "SLIME_*"}
    (synthetic / "megatron-0.13" / "summary.json").write_text(json.dumps(summary("megatron-0.13", waivers=[waiver])))
    notes = render_markdown(collect(synthetic))
    assert (
        "- megatron-0.13: waived by the subject's declaration: env-read SLIME_CHUNK_BYTES (allowed by 'SLIME_*')"
    ) in notes


def test_findings_are_shown(synthetic: Path) -> None:
    finding = {"family": "equivalence", "text": "megatron-core 0.15.3 coalesces all 4 MiB into one buffer"}
    (synthetic / "megatron-0.15" / "summary.json").write_text(json.dumps(summary("megatron-0.15", findings=[finding])))
    notes = render_markdown(collect(synthetic))
    assert "- megatron-0.15: finding (equivalence): megatron-core 0.15.3 coalesces all 4 MiB into one buffer" in notes
