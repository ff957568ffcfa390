"""The compatibility report: cells and failure entries on synthetic JUnit/summary files; a seeded red whose repro
line, taken from the report's red cell, reproduces exactly that failure; the HTML rendered by a real headless browser.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.reports.compatibility import (
    ReportError,
    collect,
    load_target,
    natural_key,
    render_html,
    render_markdown,
    write_reports,
)
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT, SEEDED, run_cases

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALLED = {
    "megatron-0.13": {"python": "3.11.7", "megatron-core": "0.13.1", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.15": {"python": "3.11.7", "megatron-core": "0.15.3", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.16": {"python": "3.11.7", "megatron-core": "0.16.1", "torch": "2.13.0+cpu", "numpy": "2.4.6"},
}
SEEDED_SUBJECT = "tests/seeded/chunks_reversed.py"
PARTITION_MESSAGE = (
    "AssertionError: [megatron-0.15] chunk-splitting property 'partition' violated by split_into_chunks: the chunks "
    "concatenated are not the input sequence (input 2 tensors, chunks hold 2 grads / 2 params; budget 1)"
)
PARTITION_REPRO = (
    f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- cases/test_chunks.py::test_partition"
)
BLOB = "@reproduce_failure('6.170.17', b'AEEBQQFBAUEAQQBBAUEB')"
PARTITION_TEXT = f"""subject = <module 'seeded'>

>       assert same, violation(
E       {PARTITION_MESSAGE}
E       assert False
E       Falsifying example: test_partition(
E           subject=<module '_megatron_conformance_subject_0_chunks_reversed'>,
E           target=Target(session='megatron-0.15',
E            python='3.11'),
E           case=([TensorSpec(name='a', shape=(1,), dtype=torch.float32, transposed=False),
E             TensorSpec(name='b', shape=(1,), dtype=torch.float32, transposed=False)],
E            1),
E       )
E
E       You can reproduce this test case by temporarily adding {BLOB} as a decorator on your test function

cases/test_chunks.py:59: AssertionError
----------------------------- megatron-conformance -----------------------------
target megatron-0.15 | contract chunk-splitting | symbol split_into_chunks
repro: {PARTITION_REPRO}"""


def _summary(session: str, **extra: object) -> dict[str, object]:
    return {
        "target": session,
        "subject": "harness.reference",
        "installed": INSTALLED[session],
        "stale_expected_failures": [],
        "exit_status": 0,
        **extra,
    }


def _junit(cases: list[tuple[str, str, str | None, dict[str, str], str]]) -> str:
    """A pytest-like JUnit document; each case is (classname, name, child tag or None, child attributes, text)."""
    suite = ET.Element("testsuite", name="pytest")
    for classname, name, tag, attributes, text in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0.1")
        if tag:
            ET.SubElement(case, tag, attributes).text = text or None
    root = ET.Element("testsuites", name="pytest tests")
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


def _write_target(reports: Path, session: str, summary: dict[str, object] | None, junit: str | None) -> None:
    directory = reports / session
    directory.mkdir(parents=True)
    if summary is not None:
        (directory / "summary.json").write_text(json.dumps(summary))
    if junit is not None:
        (directory / "junit.xml").write_text(junit)


def synthetic_reports(reports: Path) -> Path:
    """megatron-0.13 green with skips; megatron-0.15 red (repro, hypothesis), xfail, strict XPASS, setup error;
    megatron-0.16 a collection error under a seeded subject and a red in a case module this checkout lacks;
    megatron-0.9 a JUnit file but no summary."""
    chunks, smoke, equivalence = "cases.test_chunks", "cases.test_smoke", "cases.test_equivalence"
    _write_target(
        reports,
        "megatron-0.13",
        _summary("megatron-0.13", stale_expected_failures=["cases/test_gone.py"]),
        _junit(
            [
                (chunks, "test_partition", None, {}, ""),
                (chunks, "test_alignment", None, {}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[0]", None, {}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[x|y]", None, {}, ""),
                (smoke, "test_installed_versions_are_the_pins", None, {}, ""),
                (
                    equivalence,
                    "test_chunked_allreduce_matches_upstream[nccl-2-2]",
                    "skipped",
                    {"type": "pytest.skip", "message": "needs 2 CUDA GPUs"},
                    "cases/test_equivalence.py:60: needs 2 CUDA GPUs",
                ),
            ]
        ),
    )
    _write_target(
        reports,
        "megatron-0.15",
        _summary("megatron-0.15", subject=SEEDED_SUBJECT, exit_status=1),
        _junit(
            [
                (
                    chunks,
                    "test_partition",
                    "failure",
                    {"message": f"{PARTITION_MESSAGE}\nassert False\n[+9 more lines; full report in element text]"},
                    PARTITION_TEXT,
                ),
                (chunks, "test_alignment", "skipped", {"type": "pytest.xfail", "message": "listed"}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[0]", None, {}, ""),
                (
                    chunks,
                    "test_invalid_budget_is_a_value_error[x|y]",
                    "failure",
                    {"message": "[XPASS(strict)] expected failure listed in megatron-0.15.txt"},
                    "[XPASS(strict)] expected failure listed in megatron-0.15.txt",
                ),
                (
                    smoke,
                    "test_installed_versions_are_the_pins",
                    "error",
                    {"message": 'failed on setup with "RuntimeError: no megatron"'},
                    "E   RuntimeError: no megatron\n--- megatron-conformance ---\n"
                    "target megatron-0.15 | contract smoke | symbol megatron-core\n"
                    f"repro: MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- "
                    "cases/test_smoke.py::test_installed_versions_are_the_pins",
                ),
            ]
        ),
    )
    _write_target(
        reports,
        "megatron-0.16",
        _summary("megatron-0.16", subject="tests/seeded/my adapter.py", exit_status=2),
        _junit(
            [
                (chunks, "test_partition", None, {}, ""),
                (
                    "",
                    "cases.test_provider",
                    "error",
                    {"message": "collection failure"},
                    "ImportError: no pg_collection",
                ),
                (
                    "cases.test_future",
                    "test_new_api",
                    "failure",
                    {"message": "AssertionError: no new api"},
                    "E   AssertionError: no new api\n--- megatron-conformance ---\n"
                    "target megatron-0.16 | contract new-api | symbol thing\n"
                    "repro: nox -R -s megatron-0.16 -- cases/test_future.py::test_new_api",
                ),
            ]
        ),
    )
    _write_target(reports, "megatron-0.9", None, _junit([(chunks, "test_partition", None, {}, "")]))
    return reports


def table(markdown: str) -> tuple[list[str], dict[str, list[str]]]:
    """The matrix of a Markdown report: column headers, and the cells of each row keyed by its first cell."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    split = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return split[0][1:], {cells[0]: cells[1:] for cells in split[1:]}


def failure_entry(markdown: str, anchor: str) -> str:
    """The failure-section entry that a red cell's link points at."""
    start = markdown.index(f'<a id="{anchor}"></a>')
    following = markdown.find("\n### ", start)
    return markdown[start : following if following != -1 else len(markdown)]


def repro_of(entry: str) -> str:
    return re.search(r"```sh\n(.+)\n```", entry).group(1)


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    return synthetic_reports(tmp_path / "reports")


def test_columns_are_targets_in_version_order_with_installed_pins(synthetic: Path) -> None:
    headers, _ = table(render_markdown(collect(synthetic, ROOT)))
    assert [h.split("<br>")[0] for h in headers] == ["megatron-0.9", "megatron-0.13", "megatron-0.15", "megatron-0.16"]
    assert headers[1] == (
        "megatron-0.13<br><sub>megatron-core 0.13.1<br>torch 2.13.0+cpu<br>numpy 1.26.4<br>python 3.11.7</sub>"
    )
    assert "numpy 2.4.6" in headers[3]
    assert headers[0] == "megatron-0.9<br><sub>megatron-core ?<br>torch ?<br>numpy ?<br>python ?</sub>"
    assert sorted(["megatron-0.16", "megatron-0.9", "megatron-1.0"], key=natural_key)[0] == "megatron-0.9"


def test_cells_green_red_xfail_skip_with_counts(synthetic: Path) -> None:
    markdown = render_markdown(collect(synthetic, ROOT))
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
    markdown = render_markdown(collect(synthetic, ROOT))
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
    markdown = render_markdown(collect(synthetic, ROOT))
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
    markdown = render_markdown(collect(synthetic, ROOT))
    notes = markdown[markdown.index("### Notes") : markdown.index("## Failures")]
    assert "- megatron-0.9: no summary.json" in notes and "megatron-0.9: no junit.xml" not in notes
    assert "- megatron-0.13: stale expected failure: 'cases/test_gone.py' matches no test" in notes
    assert "megatron-0.15: pytest exited" not in notes
    (synthetic / "megatron-0.13" / "summary.json").write_text(json.dumps(_summary("megatron-0.13", exit_status=3)))
    (synthetic / "megatron-0.16" / "junit.xml").write_text("<testsuites><testsuite>")
    assert "pytest exited with status 3 without a failing test" in load_target(synthetic / "megatron-0.13").notes[0]
    assert load_target(synthetic / "megatron-0.16").notes[0].startswith("junit.xml is unreadable")


def test_failures_past_the_comment_limit_are_left_to_the_html_page(synthetic: Path) -> None:
    matrix = collect(synthetic, ROOT)
    full = render_markdown(matrix)
    cut = render_markdown(matrix, limit=full.index("## Failures") + 2000)
    assert len(cut) < full.index("## Failures") + 2200
    assert 'id="fail-megatron-0-15-1"' in cut and 'id="fail-megatron-0-16-1"' not in cut
    assert re.search(r"\n\d+ more not shown here \(comment size limit\): see compatibility.html.\n$", cut)


def test_html_is_self_contained_and_links_every_red(synthetic: Path) -> None:
    matrix = collect(synthetic, ROOT)
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
        collect(tmp_path, ROOT)
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
    expected = render_markdown(collect(synthetic, ROOT, sessions))
    assert (synthetic / "compatibility.md").read_text() == expected
    assert "- megatron-0.14: not run: no reports of it here" in expected
    assert (synthetic / "compatibility.html").read_text().startswith("<!DOCTYPE html>")


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def test_html_renders_in_headless_chromium(synthetic: Path, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail("install chromium: apt-get install -y chromium")
    _, _, page = write_reports(synthetic, ROOT)
    common = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert '<table class="matrix">' in dom
    headers = re.findall(r'<th scope="col">([^<]+)<span class="pins">', dom)
    assert headers == ["megatron-0.9", "megatron-0.13", "megatron-0.15", "megatron-0.16"]
    assert '<td class="failed"><a href="#fail-megatron-0-15-2">1 failed</a></td>' in dom
    assert '<section class="failure" id="fail-megatron-0-16-2">' in dom
    screenshot = tmp_path / "compatibility.png"
    subprocess.run(
        [*common, f"--screenshot={screenshot}", "--window-size=1400,900", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert _png_size(screenshot) == (1400, 900)
    assert screenshot.stat().st_size > 20_000, "the screenshot is (nearly) blank"


def test_repro_from_the_red_cell_reproduces_the_failure(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    seeded = run_cases(
        "megatron-0.15",
        ["cases/test_chunks.py::test_partition"],
        reports / "megatron-0.15",
        subject=SEEDED / "chunks_reversed.py",
    )
    assert seeded.returncode == 1, seeded.output[-3000:]
    markdown = render_markdown(collect(reports, ROOT))
    _, rows = table(markdown)
    anchor = re.fullmatch(r"\[❌ 1 failed\]\(#(.+)\)", rows["&nbsp;&nbsp;&nbsp;`test_partition`"][0]).group(1)
    entry = failure_entry(markdown, anchor)
    command = repro_of(entry)
    assert command == (
        f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED / 'chunks_reversed.py'} nox -R -s megatron-0.15 -- "
        "cases/test_chunks.py::test_partition"
    )
    reported = collect(reports, ROOT).failures[0]
    assert reported.blob and "property 'partition' violated" in reported.message[0]
    environment = {
        **os.environ,
        "MEGATRON_CONFORMANCE_REPORTS": str(tmp_path / "repro-reports"),
        "MEGATRON_CONFORMANCE_WORKERS": "0",
        "CI": "true",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    replay = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert replay.returncode == 1, replay.stdout[-3000:] + replay.stderr[-3000:]
    replayed = load_target(tmp_path / "repro-reports" / "megatron-0.15")
    assert [r.nodeid for r in replayed.results] == ["cases/test_chunks.py::test_partition"]
    again = replayed.results[0].failure
    assert again is not None
    assert again.message[0] == reported.message[0]
    assert again.blob == reported.blob
    assert again.repro == command
