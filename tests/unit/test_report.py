"""The compatibility report on synthetic JUnit/summary files: the headline, the findings and the summary on top,
columns with their subject and pins, one matrix per subject, cells, failure and advisory entries with their repro
lines, families not declared, notes, what is folded and what stays open, the comment limit, self-contained HTML, and
``nox -s report``."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.formats.summary import SessionSummary
from harness.plugin.failure import one_line, whole_message
from harness.reports.findings import Peak, target_findings
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.reports.results import ReportError, TargetRun, collect, headline, load_target, natural_key
from harness.targets.matrix import MegatronSource
from tests.pytest_helpers import ROOT
from tests.report_helpers import (
    BLOB,
    GTP_STEP,
    NOT_RUN,
    PARTITION_MESSAGE,
    PARTITION_REPRO,
    SEEDED_SUBJECT,
    SEVEN,
    columns,
    failure_entry,
    findings,
    junit_document,
    matrix_targets,
    repro_of,
    seven_target_reports,
    seven_targets,
    summaries,
    summary,
    synthetic_reports,
    table,
    tables,
    write_target,
)

SEEDED = f"Subject `{SEEDED_SUBJECT}` (module)"
"""The heading of the synthetic sessions' matrix."""
UNRECORDED = "Subject not recorded (no readable summary.json)"
"""The heading of the matrix of sessions that left no summary (megatron-0.9 in the synthetic reports)."""
DECLARATION = "/work/adapters/slime/megatron_gate.toml"
NOT_DECLARED = f"not declared: model-provider needs [provider] in {DECLARATION}"
CHUNKS = "**chunk-splitting** `cases/test_chunk_splitting.py`"
FAMILY_ROWS = ("all cases", "chunk-splitting", "equivalence", "new-api", "model-provider", "smoke")
"""The summary's rows for the synthetic sessions: the total, then each family in the per-case matrix's order."""


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    return synthetic_reports(tmp_path / "reports")


def test_columns_are_targets_in_version_order_with_installed_pins(synthetic: Path) -> None:
    matrices = tables(render_markdown(collect(synthetic)))
    assert list(matrices) == [UNRECORDED, SEEDED]
    headers, _ = matrices[SEEDED]
    assert [h.split("<br>")[0] for h in headers] == ["megatron-0.13", "megatron-0.15", "megatron-0.16"]
    assert headers[0] == (
        "megatron-0.13<br><sub>subject `chunk_splitting_last_dropped.py`<br>megatron-core 0.13.1<br>"
        "torch 2.13.0+cpu<br>numpy 1.26.4<br>python 3.11.7</sub>"
    )
    assert "numpy 2.4.6" in headers[2]
    assert matrices[UNRECORDED][0] == ["megatron-0.9<br><sub>megatron-core ?<br>torch ?<br>numpy ?<br>python ?</sub>"]
    assert sorted(["megatron-0.16", "megatron-0.9", "megatron-1.0"], key=natural_key)[0] == "megatron-0.9"


def test_cells_green_red_xfail_skip_with_counts(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    _, rows = tables(markdown)[SEEDED]
    assert list(rows)[:2] == ["**all cases**", CHUNKS]
    assert rows["**all cases**"][0] == "✅ 5 passed · ⏭️ 1 skipped"
    assert tables(markdown)[UNRECORDED][1]["**all cases**"] == ["✅ 1 passed"]
    assert rows[CHUNKS][0] == "✅ 4 passed"
    partition = rows["&nbsp;&nbsp;&nbsp;`test_partition`"]
    assert partition == ["✅ 1 passed", "[❌ 1 failed](#fail-megatron-0-15-2)", "✅ 1 passed"]
    assert rows["&nbsp;&nbsp;&nbsp;`test_alignment`"][0:2] == ["✅ 1 passed", "🟡 1 xfail"]
    grouped = rows["&nbsp;&nbsp;&nbsp;`test_invalid_budget_is_a_value_error`"]
    assert grouped[0:2] == ["✅ 2 passed", "[❌ 1 failed](#fail-megatron-0-15-1) · ✅ 1 passed"]
    equivalence = rows["**equivalence** `cases/test_equivalence.py`"]
    assert equivalence == ["⏭️ 1 skipped", "—", "—"]
    assert rows[CHUNKS][1] == "[❌ 2 failed](#fail-megatron-0-15-1) · 🟡 1 xfail · ✅ 1 passed"
    assert rows["**smoke** `cases/test_smoke.py`"][1] == "[❌ 1 failed](#fail-megatron-0-15-3)"
    assert rows["**model-provider** `cases/test_model_provider.py`"][2] == "[❌ 1 failed](#fail-megatron-0-16-2)"
    assert rows["&nbsp;&nbsp;&nbsp;`(collection)`"][2] == "[❌ 1 failed](#fail-megatron-0-16-2)"
    assert rows["**new-api** `cases/test_future.py`"][2] == "[❌ 1 failed](#fail-megatron-0-16-1)"
    assert rows["**all cases**"][2] == "[❌ 2 failed](#fail-megatron-0-16-1) · ✅ 1 passed"


def test_failure_entry_has_message_repro_and_hypothesis_replay(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    assert markdown.index("<b>Failures</b>") > markdown.index("| **all cases** |")
    entry = failure_entry(markdown, "fail-megatron-0-15-2")
    assert entry.startswith(
        '<a id="fail-megatron-0-15-2"></a>megatron-0.15 · `cases/test_chunk_splitting.py::test_partition`'
    )
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
    assert xpass.startswith(
        '<a id="fail-megatron-0-15-1"></a>megatron-0.15 · `cases/test_chunk_splitting.py::test_invalid_'
    )
    assert (
        "\npassed though listed as an expected failure (strict)\n" in xpass
        and "[XPASS(strict)] expected failure listed" in xpass
    )
    assert repro_of(xpass) == (
        f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- "
        "'cases/test_chunk_splitting.py::test_invalid_budget_is_a_value_error[x|y]'"
    )
    error = failure_entry(markdown, "fail-megatron-0-15-3")
    assert "error (setup, teardown or collection) · contract `smoke` · symbol `megatron-core`" in error
    assert repro_of(error).endswith(
        "nox -R -s megatron-0.15 -- cases/test_smoke.py::test_installed_versions_are_the_pins"
    )
    collection = failure_entry(markdown, "fail-megatron-0-16-2")
    assert repro_of(collection) == (
        f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.16 -- cases/test_model_provider.py"
    )


def test_notes_name_missing_files_stale_expectations_and_silent_exits(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic))
    notes = markdown[markdown.index("<b>Notes</b>") : markdown.index("<b>Failures</b>")]
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
    cut = render_markdown(matrix, limit=full.index("<b>Failures</b>") + 2000)
    assert len(cut) < full.index("<b>Failures</b>") + 2200
    assert 'id="fail-megatron-0-15-1"' in cut and 'id="fail-megatron-0-16-1"' not in cut
    assert re.search(r"\n\d+ more not shown here \(comment size limit\): see compatibility.html.\n\n</details>\n$", cut)
    assert cut.count("<details") == cut.count("</details>"), "a folded section the cut left open swallows the rest"


def test_html_is_self_contained_and_links_every_red(synthetic: Path) -> None:
    matrix = collect(synthetic)
    page = render_html(matrix)
    assert "<script" not in page and "<link" not in page and "src=" not in page and "://" not in page
    for failure in matrix.failures:
        assert f'<section class="failure" id="{failure.anchor}">' in page
        assert f'href="#{failure.anchor}"' in page
    per_case = page[page.index('<table class="matrix">') :]
    red_cells = re.findall(r'<td class="failed">(.*?)</td>', per_case)
    assert len(red_cells) == 11 and all(cell.startswith('<a href="#fail-') for cell in red_cells)
    assert '<td class="failed"><a href="#fail-megatron-0-15-2">1 failed</a></td>' in page
    assert '<td class="xfailed">1 xfail</td>' in page and '<td class="skipped">1 skipped</td>' in page


def report_session(reports: Path, *targets: str) -> subprocess.CompletedProcess:
    """``nox -s report [-- targets]`` on the reports directory ``reports``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nox", "-s", "report", *(["--", *targets] if targets else [])],
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
    targets = matrix_targets()
    ran = f"4 of {len({*targets, 'megatron-0.9'})} targets ran"
    assert f"{ran}; failures on megatron-0.15 (3), megatron-0.16 (2)." in completed.stderr
    headers, rows = tables((synthetic / "compatibility.md").read_text())[SEEDED]
    assert headers[1].startswith("megatron-0.14<br><sub>not run<br>") and rows["**all cases**"][1] == "—"
    expected = render_markdown(collect(synthetic, targets))
    assert (synthetic / "compatibility.md").read_text() == expected
    assert "- megatron-0.14, megatron-0.17, megatron-0.18, megatron-0.19: not run: no reports of it here" in expected
    assert expected.count("not run: no reports of it here") == 1, "a note said on four targets is said once"
    assert (synthetic / "compatibility.html").read_text().startswith("<!DOCTYPE html>")


def test_a_run_narrowed_to_some_targets_merges_only_those(synthetic: Path) -> None:
    """``report -- <targets>`` merges the targets named alone: the other sessions in the folder (an earlier run's) are
    left out of it, and the log names them."""
    completed = report_session(synthetic, "megatron-0.13", "megatron-0.14")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 of 2 targets ran" in completed.stderr, "0.14 was asked for and left nothing; 0.15-0.9 were not asked for"
    assert "left out of this report: megatron-0.9, megatron-0.15, megatron-0.16" in completed.stderr
    markdown = (synthetic / "compatibility.md").read_text()
    headers = [h for matrix in tables(markdown).values() for h in matrix[0]]
    assert sorted(h.split("<br>")[0] for h in headers) == ["megatron-0.13", "megatron-0.14"], headers
    assert "megatron-0.15" not in markdown and "megatron-0.9" not in markdown
    with pytest.raises(ReportError, match=r"no target session of megatron-0.17 in "):
        collect(synthetic, {"megatron-0.17": seven_targets()["megatron-0.17"]}, only=True)
    unknown = report_session(synthetic, "megatron-9.9")
    assert unknown.returncode != 0 and "no target named megatron-9.9 in matrix.yaml" in unknown.stderr


def test_waivers_the_subject_declared_are_shown(synthetic: Path) -> None:
    """With what happened where the session recorded it: the file and line of an env-read, say."""
    waiver = {"kind": "env-read", "name": "SLIME_CHUNK_BYTES", "allowed_by": "SLIME_*"}
    budget = {
        "kind": "env-read",
        "name": "SLIME_BUDGET",
        "allowed_by": "budget.env",
        "detail": "read (set) at slime/backends/megatron_utils/chunks.py:12",
    }
    record = summary("megatron-0.13", waivers=[waiver, budget])
    (synthetic / "megatron-0.13" / "summary.json").write_text(json.dumps(record))
    notes = render_markdown(collect(synthetic))
    assert (
        "- megatron-0.13: waived by the subject's declaration: env-read SLIME_CHUNK_BYTES (allowed by 'SLIME_*')"
    ) in notes
    assert (
        "- megatron-0.13: waived by the subject's declaration: env-read SLIME_BUDGET: read (set) at "
        "slime/backends/megatron_utils/chunks.py:12 (allowed by 'budget.env')"
    ) in notes


def test_findings_and_blockers_come_first(synthetic: Path) -> None:
    """What the gate found about the target (is the patch still needed, and enough?) and what blocked its families
    lead the report, above the matrices; families that did not run are noted below them."""
    finding = {"family": "equivalence", "text": "real step: coalesced reductions the subject does not bound: _x"}
    record = summary(
        "megatron-0.15",
        findings=[finding],
        blocked=["megatron-core 0.15.3 cannot be imported: RuntimeError: boom"],
        not_run={"model-provider": "every case skipped: not declared: model-provider needs [provider] in x.toml"},
    )
    (synthetic / "megatron-0.15" / "summary.json").write_text(json.dumps(record))
    grid = collect(synthetic)
    markdown = render_markdown(grid)
    first = markdown.index("### Findings: is the patch still needed, and enough?")
    assert first < markdown.index("| contract / case")
    top = markdown[first : markdown.index("| contract / case")]
    assert "- megatron-0.15: blocked: megatron-core 0.15.3 cannot be imported: RuntimeError: boom" in top
    assert "- megatron-0.15: equivalence: real step: coalesced reductions the subject does not bound: _x" in top
    assert "- megatron-0.15: did not run: model-provider: every case skipped: not declared" in markdown
    page = render_html(grid)
    assert page.index("Findings: is the patch still needed") < page.index("<table")


def test_where_the_time_went_is_shown_per_family(synthetic: Path) -> None:
    seconds = {"equivalence": 13.42, "import-side-effects": 4.0}
    record = summary("megatron-0.15", family_seconds=seconds, wall_time_s=21.5)
    (synthetic / "megatron-0.15" / "summary.json").write_text(json.dumps(record))
    notes = render_markdown(collect(synthetic))
    assert (
        "- megatron-0.15: time per family: equivalence 13.4 s, import-side-effects 4.0 s; pytest wall time 21.5 s"
    ) in notes


def _declared_run(reports: Path) -> None:
    """megatron-0.15 and megatron-0.16 under a declaration that leaves the model-provider role out (its two cases
    skipped as not declared), one chunk-splitting case green, and on megatron-0.16 an equivalence case skipped for
    want of GPUs."""
    undeclared = {"type": "pytest.skip", "message": NOT_DECLARED}
    no_gpu = ("cases.test_equivalence", "test_nccl", "skipped", {"type": "pytest.skip", "message": "no GPU"}, "")
    for session in ("megatron-0.15", "megatron-0.16"):
        cases = [("cases.test_chunk_splitting", "test_partition", None, {}, "")]
        cases += [
            ("cases.test_model_provider", name, "skipped", undeclared, "") for name in ("test_plain", "test_real_gpt")
        ]
        cases += [no_gpu] if session == "megatron-0.16" else []
        record = summary(session, subject=DECLARATION, subject_kind="declaration")
        write_target(reports, session, record, junit_document(cases))


def test_every_column_names_its_subject_and_selection(tmp_path: Path) -> None:
    reports, selection = tmp_path / "reports", ["cases/test_chunk_splitting.py::test_partition", "-k", "not slow"]
    _declared_run(reports)
    narrowed = summary("megatron-0.16", subject=DECLARATION, subject_kind="declaration", selection=selection)
    (reports / "megatron-0.16" / "summary.json").write_text(json.dumps(narrowed))
    grid = collect(reports)
    matrices = columns(render_markdown(grid))
    heading = f"Subject `{DECLARATION}` (declaration)"
    assert list(matrices) == [heading]
    assert matrices[heading]["megatron-0.15"][:2] == ["subject `megatron_gate.toml`", "megatron-core 0.15.3"]
    assert matrices[heading]["megatron-0.16"][:3] == [
        "subject `megatron_gate.toml`",
        "selection `cases/test_chunk_splitting.py::test_partition -k not slow`",
        "megatron-core 0.16.1",
    ]
    page = render_html(grid).replace("<wbr>", "")
    assert f"<h2>Summary: subject <code>{DECLARATION}</code> (declaration)</h2>" in page
    assert f"<summary>Every case: subject <code>{DECLARATION}</code> (declaration)</summary>" in page
    assert page.count(f'subject <code title="{DECLARATION} (declaration)">megatron_gate.toml</code>') == 2
    assert page.count("selection <code>cases/test_chunk_splitting.py::test_partition -k not slow</code>") == 1


def test_a_declaration_column_names_its_framework_package_and_file(tmp_path: Path) -> None:
    """Every declaration is called megatron-conformance.toml: two frameworks' columns are told apart by their adapter
    package and the file below their source root, the label the session recorded (or, from an older summary, read
    from the declaration where it still is); the full path stays in the heading and the HTML title."""
    reports = tmp_path / "reports"
    labels = {name: f"{name}.backends.megatron_utils (megatron-conformance.toml)" for name in ("modernrl", "legacyrl")}
    for session, framework in (("megatron-0.15", "modernrl"), ("megatron-0.16", "legacyrl")):
        path = ROOT / "tests" / "frameworks" / framework / "megatron-conformance.toml"
        record = summary(session, subject=str(path), subject_kind="declaration")
        if framework == "modernrl":  # legacyrl's summary is an older one, without the label
            record["subject_label"] = labels[framework]
        write_target(
            reports, session, record, junit_document([("cases.test_chunk_splitting", "test_partition", None, {}, "")])
        )
    grid = collect(reports)
    found = columns(render_markdown(grid))
    modern = ROOT / "tests" / "frameworks" / "modernrl" / "megatron-conformance.toml"
    legacy = ROOT / "tests" / "frameworks" / "legacyrl" / "megatron-conformance.toml"
    assert found[f"Subject `{modern}` (declaration)"]["megatron-0.15"][0] == f"subject `{labels['modernrl']}`"
    assert found[f"Subject `{legacy}` (declaration)"]["megatron-0.16"][0] == f"subject `{labels['legacyrl']}`"
    page = render_html(grid).replace("<wbr>", "")
    assert f'subject <code title="{modern} (declaration)">{labels["modernrl"]}</code>' in page


def test_sessions_of_different_subjects_get_a_matrix_each(synthetic: Path) -> None:
    adapter = "tests/seeded/my adapter.py"
    for session, subject in (("megatron-0.13", "harness.reference"), ("megatron-0.16", adapter)):
        (synthetic / session / "summary.json").write_text(json.dumps(summary(session, subject=subject)))
    grid = collect(synthetic, matrix_targets())
    markdown = render_markdown(grid)
    matrices = columns(markdown)
    reference, other = "Subject `harness.reference` (module)", f"Subject `{adapter}` (module)"
    assert list(matrices) == [UNRECORDED, reference, SEEDED, other]
    ran = {heading: [s for s, lines in found.items() if "not run" not in lines] for heading, found in matrices.items()}
    assert ran == {
        UNRECORDED: ["megatron-0.9"],
        reference: ["megatron-0.13"],
        SEEDED: ["megatron-0.15"],
        other: ["megatron-0.16"],
    }
    assert all("megatron-0.14" in found for found in matrices.values())
    assert matrices[reference]["megatron-0.13"][0] == "subject `harness.reference`"
    assert matrices[other]["megatron-0.16"][0] == "subject `my adapter.py`"
    assert "**smoke** `cases/test_smoke.py`" in tables(markdown)[SEEDED][1]
    assert "**smoke** `cases/test_smoke.py`" not in tables(markdown)[other][1]
    assert markdown.splitlines()[2].startswith("4 of 8 targets ran · 3 subjects · 5 reds: ")
    assert repro_of(failure_entry(markdown, "fail-megatron-0-16-2")) == (
        f"MEGATRON_CONFORMANCE_SUBJECT='{adapter}' nox -R -s megatron-0.16 -- cases/test_model_provider.py"
    )
    page = render_html(grid).replace("<wbr>", "")
    assert page.count('<table class="matrix">') == page.count('<table class="summary">') == 4
    assert f"<h2>Summary: subject <code>{adapter}</code> (module)</h2>" in page


def test_a_target_that_did_not_run_shows_its_matrix_pins(synthetic: Path, tmp_path: Path) -> None:
    (synthetic / "megatron-0.15" / "summary.json").unlink()
    grid = collect(synthetic, matrix_targets())
    headers = {session: lines for found in columns(render_markdown(grid)).values() for session, lines in found.items()}
    assert headers["megatron-0.14"] == [
        "not run",
        "pins from matrix.yaml",
        "megatron-core ==0.14.0",
        "torch ==2.13.0",
        "numpy &lt;2",
        "python 3.11",
    ]
    assert headers["megatron-0.17"][-2:] == ["numpy unpinned", "python 3.12"]
    assert headers["megatron-0.15"][:2] == ["pins from matrix.yaml", "megatron-core ==0.15.3"]
    assert [session for session, lines in headers.items() if any("?" in line for line in lines)] == ["megatron-0.9"]
    page = render_html(grid)
    assert (
        '<th scope="col">megatron-0.14<span class="pins">not run<br>pins from matrix.yaml<br>megatron-core ==0.14.0<br>'
        "torch ==2.13.0<br>numpy &lt;2<br>python 3.11</span></th>"
    ) in page
    wheel = MegatronSource("wheel", "/wheels/megatron_core-0.17.0-py3-none-any.whl", None)
    target = replace(matrix_targets()["megatron-0.17"], session="megatron-0.17w", megatron=wheel)
    assert load_target(tmp_path / "megatron-0.17w", target).version("megatron-core") == (
        "wheel megatron_core-0.17.0-py3-none-any.whl"
    )


def _background(page: str, selector: str) -> str:
    return re.search(rf"\n{re.escape(selector)} \{{ background: (#\w+);", page).group(1)


def test_advisories_are_amber_beside_the_cell_colour_and_listed_with_repro_lines(synthetic: Path) -> None:
    def advise(session: str, case: str) -> dict[str, str]:
        text = f"few-collectives: 3 collectives where 2 suffice on {session}"
        return {"family": "chunk-splitting", "case": case, "text": text, "repro": f"nox -R -s {session} -- {case}"}

    for session, case in (("megatron-0.13", "test_alignment"), ("megatron-0.15", "test_partition")):
        advisories = [advise(session, f"cases/test_chunk_splitting.py::{case}")]
        (synthetic / session / "summary.json").write_text(json.dumps(summary(session, advisories=advisories)))
    grid = collect(synthetic)
    markdown = render_markdown(grid)
    _, rows = tables(markdown)[SEEDED]
    assert rows[CHUNKS][0] == "✅ 4 passed · [🟠 1 advisory](#adv-megatron-0-13-1)"
    assert rows["&nbsp;&nbsp;&nbsp;`test_alignment`"][0] == "✅ 1 passed · [🟠 1 advisory](#adv-megatron-0-13-1)"
    assert rows["&nbsp;&nbsp;&nbsp;`test_partition`"][:2] == [
        "✅ 1 passed",
        "[❌ 1 failed](#fail-megatron-0-15-2) · [🟠 1 advisory](#adv-megatron-0-15-1)",
    ]
    assert rows["**all cases**"][0] == "✅ 5 passed · ⏭️ 1 skipped · [🟠 1 advisory](#adv-megatron-0-13-1)"
    assert rows["**smoke** `cases/test_smoke.py`"][0] == "✅ 1 passed"
    entry = failure_entry(markdown, "adv-megatron-0-13-1")
    assert entry.startswith(
        '<a id="adv-megatron-0-13-1"></a>megatron-0.13 · `cases/test_chunk_splitting.py::test_alignment`'
    )
    assert "advisory · contract `chunk-splitting`" in entry
    assert "```text\nfew-collectives: 3 collectives where 2 suffice on megatron-0.13\n```" in entry
    assert repro_of(entry) == "nox -R -s megatron-0.13 -- cases/test_chunk_splitting.py::test_alignment"
    assert markdown.index("<b>Advisories</b>") > markdown.index("<b>Failures</b>")
    assert "failures on megatron-0.15 (3), megatron-0.16 (2)." in markdown
    page = render_html(grid)
    assert '<td class="passed">4 passed · <a class="advisory" href="#adv-megatron-0-13-1">1 advisory</a></td>' in page
    assert (
        '<td class="failed"><a href="#fail-megatron-0-15-2">1 failed</a> · '
        '<a class="advisory" href="#adv-megatron-0-15-1">1 advisory</a></td>'
    ) in page
    section = page[page.index('<section class="advisory-entry" id="adv-megatron-0-15-1">') :]
    repro = (
        '<pre class="repro"><code>nox -R -s megatron-0.15 -- cases/test_chunk_splitting.py::test_partition</code></pre>'
    )
    assert repro in section[: section.index("</section>")]
    colours = [_background(page, selector) for selector in (".advisory", "td.passed", "td.failed", "td.xfailed")]
    assert len(set(colours)) == 4
    assert "Whole message" not in markdown, "a one-line advisory has nothing more to fold"


def test_an_advisory_that_says_more_than_one_line_folds_its_whole_message(synthetic: Path) -> None:
    """A diff in an advisory keeps its indentation in the record (less the two spaces pytest puts before each later
    line of an assert message) and is folded below the one line in both pages."""
    message = (
        "AssertionError: [megatron-0.13] api-fingerprint: upstream changed functions the subject's copies were taken "
        "from:\n    m:f: upstream's body changed: 1 line added, 1 removed. Review the copy against it:\n"
        "  --- megatron-core 0.12.0: m.py:1\n  +++ megatron-core 0.13.1: m.py:1\n  @@ -1,2 +1,2 @@\n   def f(x):\n"
        "  -    return x\n  +    return x, x\nassert not ['m:f: ...']"
    )
    detail = whole_message(message)
    assert detail.startswith("[megatron-0.13] api-fingerprint: upstream changed"), detail
    assert detail.endswith("+    return x, x"), detail
    assert "\n--- megatron-core 0.12.0: m.py:1\n" in detail and "\n def f(x):\n-    return x\n" in detail
    assert "\n  m:f: upstream's body changed" in detail and "assert not" not in detail
    assert whole_message("AssertionError: [megatron-0.13] a: one finding:\n  the finding\nassert not [1]") == ""
    advisory = {
        "family": "api-fingerprint",
        "case": "cases/test_api_fingerprint.py::test_upstream_bodies_are_what_each_copy_was_taken_from",
        "text": one_line(message),
        "repro": "nox -R -s megatron-0.13 -- cases/test_api_fingerprint.py",
        "detail": detail,
    }
    (synthetic / "megatron-0.13" / "summary.json").write_text(
        json.dumps(summary("megatron-0.13", advisories=[advisory]))
    )
    grid = collect(synthetic)
    entry = failure_entry(render_markdown(grid), "adv-megatron-0-13-1")
    assert f"<details><summary>Whole message</summary>\n\n```text\n{detail}\n```\n\n</details>" in entry, entry
    assert f"<details><summary>Whole message</summary><pre>{html.escape(detail)}</pre></details>" in render_html(grid)


def test_a_family_the_declaration_leaves_out_reads_not_declared(tmp_path: Path) -> None:
    _declared_run(tmp_path / "reports")
    grid = collect(tmp_path / "reports")
    markdown = render_markdown(grid)
    _, rows = table(markdown)
    assert rows["**model-provider** `cases/test_model_provider.py`"] == ["⚪ not declared", "⚪ not declared"]
    assert rows["&nbsp;&nbsp;&nbsp;`test_plain`"] == ["⚪ not declared", "⚪ not declared"]
    assert rows["**equivalence** `cases/test_equivalence.py`"] == ["—", "⏭️ 1 skipped"]
    assert rows["**all cases**"] == ["✅ 1 passed · ⚪ not declared", "✅ 1 passed · ⚪ not declared · ⏭️ 1 skipped"]
    listing = f"\n- model-provider on megatron-0.15, megatron-0.16: `{NOT_DECLARED}`\n"
    assert markdown.index(listing) > markdown.index("| **all cases** |")
    _, summary_rows = summaries(markdown)[f"subject `{DECLARATION}` (declaration)"]
    assert summary_rows["**model-provider**"] == ["⚪ not declared", "⚪ not declared"]
    assert summary_rows["**equivalence**"] == ["did not run", "⏭️ 1 skipped"]
    page = render_html(grid).replace("<wbr>", "")
    per_case = page[page.index('<table class="matrix">') :]
    assert len(re.findall(r'<td class="undeclared">not declared</td>', per_case)) == 6
    provider = re.search(
        r'<th scope="row">model-provider <code>cases/test_model_provider.py</code></th>(.*?)</tr>', page
    )
    assert provider.group(1) == '<td class="undeclared">not declared</td>' * 2
    assert f"<li>model-provider on megatron-0.15, megatron-0.16: <code>{NOT_DECLARED}</code></li>" in page


def test_a_rebuilt_repro_line_names_the_matrix_the_session_ran_from(synthetic: Path) -> None:
    """A candidate's session runs from a generated matrix: a repro line without it would replay another target."""
    recorded = json.loads((synthetic / "megatron-0.15" / "summary.json").read_text())
    matrix = "/elsewhere/reports/candidate/matrix.yaml"
    (synthetic / "megatron-0.15" / "summary.json").write_text(json.dumps({**recorded, "matrix": matrix}))
    xpass = failure_entry(render_markdown(collect(synthetic)), "fail-megatron-0-15-1")
    prefix = f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} MEGATRON_CONFORMANCE_MATRIX={matrix} nox -R -s "
    assert repro_of(xpass).startswith(f"{prefix}megatron-0.15 -- ")


def test_the_headline_says_how_many_targets_ran(synthetic: Path, tmp_path: Path) -> None:
    """A target of the matrix that left nothing is no green: "7 targets, no failure" would pass it for one."""
    seven = seven_target_reports(tmp_path / "seven")
    assert headline(collect(seven, seven_targets())) == "6 of 7 targets ran, no failure."
    assert headline(collect(seven)) == "6 targets, no failure."
    grid = collect(synthetic, {NOT_RUN: matrix_targets()[NOT_RUN]})
    assert headline(grid).startswith("4 of 5 targets ran; failures on megatron-0.15 (3), megatron-0.16 (2).")
    assert "\n4 of 5 targets ran; failures on" in render_markdown(grid)
    assert '<p class="headline">4 of 5 targets ran; failures on' in render_html(grid)


def test_the_summary_is_a_row_per_family_and_a_column_per_target_above_every_case(synthetic: Path) -> None:
    grid = collect(synthetic, {NOT_RUN: matrix_targets()[NOT_RUN]})
    markdown = render_markdown(grid)
    headers, rows = summaries(markdown)[f"subject `{SEEDED_SUBJECT}` (module)"]
    assert headers == [
        "megatron-0.13<br><sub>0.13.1</sub>",
        "megatron-0.14<br><sub>not run</sub>",
        "megatron-0.15<br><sub>0.15.3</sub>",
        "megatron-0.16<br><sub>0.16.1</sub>",
    ]
    assert list(rows) == [f"**{name}**" for name in FAMILY_ROWS]
    assert rows["**all cases**"] == [
        "✅ 5 passed",
        "not run",
        "[❌ 3 of 5 failed](#fail-megatron-0-15-1)",
        "[❌ 2 of 3 failed](#fail-megatron-0-16-1)",
    ]
    assert rows["**chunk-splitting**"][2] == "[❌ 2 of 4 failed](#fail-megatron-0-15-1)"
    assert rows["**smoke**"] == ["✅ 1 passed", "not run", "[❌ 1 of 1 failed](#fail-megatron-0-15-3)", "did not run"]
    assert rows["**equivalence**"] == ["⏭️ 1 skipped", "not run", "did not run", "did not run"]
    assert markdown.index("### Summary: ") < markdown.index(f"### {SEEDED}")
    page = render_html(grid)
    summary = page[page.index('<table class="summary">') : page.index('<table class="matrix">')]
    assert '<th scope="col">megatron-0.14<span class="pins">not run</span></th>' in summary
    assert '<td class="failed"><a href="#fail-megatron-0-15-1">3 of 5 failed</a></td>' in summary
    assert '<td class="none">not run</td>' in summary and '<td class="skipped">1 skipped</td>' in summary


def test_a_blocked_family_reads_blocked_and_links_its_red(synthetic: Path) -> None:
    blocker = "megatron-core 0.15.3 cannot be imported: importing megatron.core raised RuntimeError: no megatron"
    not_run = {"smoke": f"blocked: {blocker}", "equivalence": "not selected in this run"}
    record = summary("megatron-0.15", exit_status=1, blocked=[blocker], not_run=not_run)
    (synthetic / "megatron-0.15" / "summary.json").write_text(json.dumps(record))
    grid = collect(synthetic)
    markdown = render_markdown(grid)
    _, rows = summaries(markdown)[f"subject `{SEEDED_SUBJECT}` (module)"]
    assert rows["**smoke**"][1] == "[❌ blocked](#fail-megatron-0-15-3)"
    assert f"\n- megatron-0.15: blocked: {blocker}\n" in markdown[: markdown.index("### Summary: ")]
    page = render_html(grid)
    assert f'<td class="failed" title="blocked: {blocker}"><a href="#fail-megatron-0-15-3">blocked</a></td>' in page
    assert '<td class="none" title="not selected in this run">did not run</td>' in page


def test_findings_lead_the_report_as_a_column_per_target(tmp_path: Path) -> None:
    """Whether the patch is still needed and what it leaves unbounded, read into a few short rows above the summary,
    and not listed again as the sessions worded it."""
    grid = collect(seven_target_reports(tmp_path / "reports"), seven_targets())
    markdown = render_markdown(grid)
    headers, rows = findings(markdown)
    assert headers == list(SEVEN)
    assert rows["patch still needed?"] == ["**needed**", "not run", *["**needed**"] * 5]
    assert rows["real step (GPTModel TP 2 + SP, world 2, gloo)"] == [
        "896 B → 4 B",
        "—",
        *["896 B → 4 B"] * 5,
    ]
    gtp = "real step (GPTModel TP 2 + SP, a GTP weight-remat group of 2, world 2, gloo)"
    assert rows[gtp] == ["—"] * 6 + ["17.3 KiB → 17.3 KiB"]
    assert rows["largest-buffer population, 4 MiB"][-1] == "4 MiB → 128 KiB"
    unbounded = "`_allreduce_replicated_grads_over_gtp_remat_group` (17.3 KiB in one buffer)"
    assert rows["coalesced reductions the subject does not bound"] == ["none", "—", *["none"] * 4, unbounded]
    assert rows["not exercised here, and not replaced by the subject"][-1] == "`_allreduce_conditional_embedding_grads`"
    assert list(rows)[1:4] == [
        "real step (GPTModel TP 2 + SP, world 2, gloo)",
        gtp,
        "largest-buffer population, 4 MiB",
    ]
    assert GTP_STEP not in markdown and "megatron-core 0.15.3, real step" not in markdown
    assert markdown.index("### Findings: ") < markdown.index("### Summary: ") < markdown.index("<b>Every case</b>")
    page = render_html(grid)
    assert page.index('<table class="findings">') < page.index('<table class="summary">')
    assert '<td class="unbounded"><code>_<wbr>allreduce_<wbr>replicated_<wbr>grads_<wbr>over_<wbr>gtp_<wbr>' in page


def test_findings_of_other_shapes_are_kept_whole_and_a_target_within_the_bound_needs_no_patch(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    population = "the largest-buffer population (4 MiB of sequence-parallel grads)"
    own = f"megatron-core 0.16.1 chunks {population} on its own (peak 131072 bytes, within the 524288-byte bound)"
    fallback = "world 2, TP 2, gloo: upstream raised AttributeError: 'NoneType' (3 example(s))"
    cuda = (
        f"on CUDA (nccl): megatron-core 0.13.1, {population}: upstream holds 2097152 bytes of it at once (peak "
        "2097152 bytes), the subject's call peaks at 131072"
    )
    for session, texts in (("megatron-0.13", [cuda]), ("megatron-0.16", [own, fallback])):
        records = [{"family": "equivalence", "text": text} for text in texts]
        write_target(reports, session, summary(session, findings=records), None)
    markdown = render_markdown(collect(reports))
    _, rows = findings(markdown)
    assert rows["patch still needed?"] == ["**needed**", "**not needed**"]
    assert rows["largest-buffer population, 4 MiB, CUDA nccl"] == ["2 MiB → 128 KiB", "—"]
    assert rows["largest-buffer population, 4 MiB"] == ["—", "128 KiB, within the bound"]
    assert rows["coalesced reductions the subject does not bound"] == ["—", "—"]
    assert f"\n- megatron-0.16: equivalence: {fallback}" in markdown
    assert own not in markdown and cuda not in markdown


def test_the_real_steps_finding_is_read_as_step_memory_words_it() -> None:
    """The findings row reads the sentence :func:`harness.contracts.step_memory.finding` writes (imported here: it
    needs torch, the rest of this file does not); a rewording there fails here, not silently in the report."""
    from harness.contracts.step_memory import StepMemory, finding

    step = StepMemory(
        upstream_peak_bytes=17728,
        subject_peak_bytes=17728,
        reductions=["_replaced", "_left_alone", "_idle"],
        replaced=["_replaced"],
        subject_sites={"_left_alone": 17728},
        upstream_sites={"_left_alone": 17728},
    )
    text = finding("GPTModel TP 2 + SP, world 2, gloo", "0.19.2", [step])
    run = TargetRun("megatron-0.19", SessionSummary(findings=[{"family": "equivalence", "text": text}]), [], [])
    row = target_findings(run)
    assert row.peaks == [Peak("real step (GPTModel TP 2 + SP, world 2, gloo)", 17728, 17728, False)]
    assert (row.unbounded, row.not_exercised, row.other) == ({"_left_alone": 17728}, ["_idle"], [])
    assert row.verdict == "not needed"


def _folds(text: str) -> dict[str, bool]:
    """Every ``id`` in ``text`` (HTML or the Markdown's HTML), and whether every ``<details>`` around it is open."""
    opened: list[bool] = []
    found = {}
    for tag in re.finditer(r'<details( open)?[^>]*>|</details>|\bid="([^"]+)"', text):
        if tag.group(0).startswith("<details"):
            opened.append(" open" in tag.group(0))
        elif tag.group(0) == "</details>":
            opened.pop()
        else:
            found[tag.group(2)] = all(opened)
    assert not opened, "a <details> is never closed"
    return found


def test_every_case_and_the_entries_are_folded_and_a_fold_holding_a_red_is_open(
    synthetic: Path, tmp_path: Path
) -> None:
    grid = collect(synthetic)
    markdown, page = render_markdown(grid), render_html(grid)
    for text in (markdown, page):
        folds = _folds(text)
        assert {anchor for anchor in folds if anchor.startswith("fail-")} == {f.anchor for f in grid.failures}
        assert all(folds[failure.anchor] for failure in grid.failures), "a red is folded away"
    assert f"<details open><summary><b>Every case</b>: subject <code>{SEEDED_SUBJECT}</code></summary>" in markdown
    assert "<details><summary><b>Every case</b>: subject not recorded</summary>" in markdown
    assert "<details open><summary><b>Failures</b> (5)</summary>" in markdown
    assert "<details><summary><b>Notes</b> (2)</summary>" in markdown
    assert '<details class="section" open><summary>Failures (5)</summary>' in page
    assert '<details class="section"><summary>Notes (2)</summary>' in page
    unbroken = page.replace("<wbr>", "")
    every_case = f"<summary>Every case: subject <code>{SEEDED_SUBJECT}</code> (module)</summary>"
    assert f'<details class="section" open>{every_case}' in unbroken
    assert '<details class="section"><summary>Every case: subject not recorded' in unbroken
    green = collect(seven_target_reports(tmp_path / "seven"), seven_targets())
    markdown, page = render_markdown(green), render_html(green)
    assert "<details open" not in markdown and '<details class="section" open' not in page
    assert markdown.count("<details>") == page.count('<details class="section">') == 3
    assert not any(_folds(markdown).values()), "an advisory of a green report is left open"


def test_a_frameworks_own_junit_files_are_not_targets(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    (reports / "unit").mkdir(parents=True)
    (reports / "unit" / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="tests.test_x" name="test_y" file="tests/test_x.py"/>'
        "</testsuite></testsuites>"
    )
    (reports / "broken").mkdir()
    (reports / "broken" / "junit.xml").write_text("<testsuites")
    with pytest.raises(ReportError, match="no target session"):
        collect(reports)


def test_a_session_of_several_subjects_gives_each_its_own_matrix_and_counts_as_one_target(tmp_path: Path) -> None:
    """``nox -s megatron-0.15`` with two subjects writes ``1-<name>/`` and ``2-<name>/``: one matrix each, columns
    and anchors of their own, and one target in the headline."""
    reports, red = tmp_path / "reports", ("cases.test_chunk_splitting", "test_partition", "failure", {}, "boom")
    write_target(reports / "megatron-0.15", "1-seeded", summary("megatron-0.15"), junit_document([red]))
    green = [("cases.test_chunk_splitting", "test_partition", None, {}, "")]
    reference = summary("megatron-0.15", subject="harness.reference")
    write_target(reports / "megatron-0.15", "2-harness.reference", reference, junit_document(green))
    grid = collect(reports, {"megatron-0.15": matrix_targets()["megatron-0.15"]})
    seeded = "chunk_splitting_last_dropped.py"
    assert [run.session for run in grid.targets] == [f"megatron-0.15 ({seeded})", "megatron-0.15 (harness.reference)"]
    assert {run.target_session for run in grid.targets} == {"megatron-0.15"}
    assert len(grid.matrices) == 2
    text = headline(grid)
    assert text == f"1 target · 2 subjects · 1 red: {seeded} 1 (megatron-0.15)."
    page = render_html(grid)
    anchors = re.findall(r'id="(fail-[^"]+)"', page)
    assert anchors and len(anchors) == len(set(anchors)), anchors
    (reports / "megatron-0.15" / "3-killed").mkdir()  # a subject's session that left nothing readable
    assert headline(collect(reports)).startswith("0 of 1 targets ran · "), "a target is not green on some subjects"
