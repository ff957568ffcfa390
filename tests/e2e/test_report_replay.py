"""The report end to end: its HTML rendered by a real headless browser (seven targets within a 1400 px window), and a
seeded red whose repro line, taken from the report's red cell, reproduces exactly that failure on a real target."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from harness.reports.compatibility import write_reports
from harness.reports.markdown import render_markdown
from harness.reports.results import collect, load_target
from tests.pytest_helpers import ROOT, SEEDED, run_target_cases
from tests.report_helpers import (
    SEVEN,
    failure_entry,
    repro_of,
    seven_target_reports,
    seven_targets,
    synthetic_reports,
    table,
)
from tests.several_subjects import four_subject_reports, four_targets

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


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    return synthetic_reports(tmp_path / "reports")


def headless_browser() -> str:
    """The browser ``nox -s tests`` made sure of (``MEGATRON_CONFORMANCE_BROWSER``), else one on PATH."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    found = os.environ.get("MEGATRON_CONFORMANCE_BROWSER") or next(filter(None, map(shutil.which, names)), None)
    if not found:
        pytest.fail(f"no headless browser on PATH ({', '.join(names)}): install chromium, or run nox -s tests")
    return found


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def test_html_renders_in_headless_chromium(synthetic: Path, tmp_path: Path) -> None:
    _, _, page = write_reports(synthetic)
    common = [headless_browser(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert '<table class="matrix">' in dom
    per_case = dom[dom.index('<table class="matrix">') :]
    headers = re.findall(r'<th scope="col">([^<]+)<span class="pins">', per_case)
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


MEASURE = (
    "<script>for (const folded of document.querySelectorAll('details')) folded.open = true;"
    "const page = document.documentElement;"
    "document.body.dataset.widths = `${page.scrollWidth} ${page.clientWidth}`;</script>"
)
"""Appended to a copy of the page (the report itself has no script): unfolds every ``<details>``, then records how
wide the page lays out against the window."""


def dumped_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of ``page`` once its scripts ran, in a 1400 x 900 headless window."""
    command = [headless_browser(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,900"]
    return subprocess.run(
        [*command, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout


def laid_out(page: str, tmp_path: Path) -> tuple[str, int, int]:
    """The DOM of ``page`` (every fold opened) in a 1400 px headless window, and how wide it lays out against it."""
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", f"{MEASURE}</body>"))
    dom = dumped_dom(measured, tmp_path)
    scroll, window = map(int, re.search(r'data-widths="(\d+) (\d+)"', dom).groups())
    assert 1300 < window <= 1400, f"the window is {window} px wide, not 1400"
    return dom, scroll, window


def test_seven_targets_fit_a_1400_px_window_unfolded(tmp_path: Path) -> None:
    """Seven columns of long pins and case names once overflowed after the fifth; with every fold open the page
    must still be no wider than the window."""
    _, _, page = write_reports(seven_target_reports(tmp_path / "reports"), seven_targets())
    dom, scroll, window = laid_out(page.read_text(), tmp_path)
    assert dom.count("<details") == dom.count('<details class="section" open="">') == 3, "the folds did not open"
    summary = dom[dom.index('<table class="summary">') : dom.index("</thead>", dom.index('<table class="summary">'))]
    assert re.findall(r'<th scope="col">(megatron-[\d.]+)<', summary) == list(SEVEN)
    assert scroll <= window, f"the page is {scroll} px wide in a {window} px window"


def test_four_subjects_on_four_targets_fit_a_1400_px_window_unfolded(tmp_path: Path) -> None:
    """The before and after of an upgrade and two more frameworks, on four targets: the comparison first, and every
    fold open, the page no wider than the window."""
    _, _, page = write_reports(four_subject_reports(tmp_path / "reports"), four_targets())
    dom, scroll, window = laid_out(page.read_text(), tmp_path)
    assert dom.index("<h2>Comparison") < dom.index("<h2>Findings") < dom.index("<h2>Summary")
    assert dom.count('<table class="summary">') == 4
    assert scroll <= window, f"the page is {scroll} px wide in a {window} px window"


COMMENT = (
    "<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
    "body { margin: 0; } .comment { width: {width}px; margin: 24px; padding: 16px; border: 1px solid #d0d7de;"
    " font: 14px/1.5 'DejaVu Sans', sans-serif; overflow-wrap: break-word; }"
    " .comment code { font: 12px 'DejaVu Sans Mono', monospace; white-space: break-spaces; }"
    " .comment pre { overflow: auto; } .comment pre code { white-space: pre; }"
    " .comment table { display: block; width: max-content; max-width: 100%; overflow: auto; border-spacing: 0; }"
    " .comment td, .comment th { padding: 6px 13px; border: 1px solid #d0d7de; }"
    "</style></head><body><div class='comment'>{body}</div>"
    "<script>for (const f of document.querySelectorAll('details')) f.open = true;"
    "const wide = [...document.querySelectorAll('.comment table')].filter(t => t.scrollWidth > t.clientWidth);"
    "document.body.dataset.wide = wide.map(t => t.rows[0].cells[0].textContent).join('|');"
    "const c = document.querySelector('.comment'); document.body.dataset.comment = `${c.scrollWidth} ${c.clientWidth}`;"
    "</script></body></html>"
)
"""A pull-request comment as GitHub lays one out in a 1400 px window: the Markdown rendered to HTML (tables, raw
HTML and ``<details>`` kept), in a comment box about 900 px wide whose tables scroll sideways when too wide (the
``display: block; overflow: auto`` GitHub gives them). Every fold is opened; the page records which tables scroll
and how wide the box lays out."""
COMMENT_WIDTH = 880


def test_four_subjects_on_four_targets_fit_a_pull_request_comment(tmp_path: Path) -> None:
    _, markdown, _ = write_reports(four_subject_reports(tmp_path / "reports"), four_targets())
    body = MarkdownIt("commonmark").enable("table").render(markdown.read_text())
    page = tmp_path / "comment.html"
    page.write_text(COMMENT.replace("{width}", str(COMMENT_WIDTH)).replace("{body}", body))
    dom = dumped_dom(page, tmp_path)
    assert "<h3>Comparison: each subject against" in dom
    scroll, width = map(int, re.search(r'data-comment="(\d+) (\d+)"', dom).groups())
    assert scroll <= width, f"the comment is {scroll} px wide in a {width} px box"
    wide = re.search(r'data-wide="([^"]*)"', dom).group(1)
    assert wide == "", f"these tables scroll sideways in a {COMMENT_WIDTH} px comment: {wide}"


def test_repro_from_the_red_cell_reproduces_the_failure(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    seeded = run_target_cases(
        "megatron-0.15",
        ["cases/test_chunk_splitting.py::test_partition"],
        reports / "megatron-0.15",
        subject=SEEDED / "chunk_splitting_last_dropped.py",
    )
    assert seeded.returncode == 1, seeded.output[-3000:]
    markdown = render_markdown(collect(reports))
    _, rows = table(markdown)
    anchor = re.fullmatch(r"\[❌ 1 failed\]\(#(.+)\)", rows["&nbsp;&nbsp;&nbsp;`test_partition`"][0]).group(1)
    entry = failure_entry(markdown, anchor)
    command = repro_of(entry)
    assert command == (
        f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED / 'chunk_splitting_last_dropped.py'} nox -R -s megatron-0.15 -- "
        "cases/test_chunk_splitting.py::test_partition"
    )
    reported = collect(reports).failures[0]
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
    assert [r.nodeid for r in replayed.results] == ["cases/test_chunk_splitting.py::test_partition"]
    again = replayed.results[0].failure
    assert again is not None
    assert again.message[0] == reported.message[0]
    assert again.blob == reported.blob
    assert again.repro == command
