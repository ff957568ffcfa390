"""The compatibility report: every target session's results read into one matrix per subject, as Markdown and HTML.

Each target session leaves ``reports/<session>/junit.xml`` and ``summary.json``, on one machine or as one CI artifact
per matrix job. Reading those files back (no venv, no Megatron) gives what a reviewer reads before bumping Megatron,
on one screen: the findings (is the patch still needed, and enough?) and a summary (families by targets, one verdict
a cell), then, folded, every case with the versions actually installed, every red linked to what failed and to the
line that replays it. ``nox -s report`` writes it as ``reports/compatibility.md`` (a PR comment, the job summary) and
``reports/compatibility.html`` (one self-contained page, no scripts, no network).

The model and the reading of a session folder are :mod:`harness.reports.results`, the findings' rows
:mod:`harness.reports.findings`, the summary's verdicts :mod:`harness.reports.overview`; the renderings are
:mod:`harness.reports.markdown` and :mod:`harness.reports.html`, their first screens
:mod:`harness.reports.markdown_overview` and :mod:`harness.reports.html_overview`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.reports.comparison import baseline_of
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.reports.results import ReportError, ResultGrid, collect, headline
from harness.targets.matrix import Target

__all__ = ["ReportError", "headline", "write_reports"]


def write_reports(
    reports: Path, expected: Mapping[str, Target] | None = None, baseline: str | None = None, only: bool = False
) -> tuple[ResultGrid, Path, Path]:
    """Collect ``reports`` (with the matrix's targets by session, so that one that left nothing still shows its pins;
    with ``only``, those targets alone) and write ``compatibility.md`` and ``compatibility.html`` beside the session
    folders; several subjects are each compared with ``baseline`` (a subject's label), else with the first."""
    grid = collect(reports, expected, only)
    baseline_of(grid, baseline)
    markdown, page = reports / "compatibility.md", reports / "compatibility.html"
    markdown.write_text(render_markdown(grid, baseline=baseline))
    page.write_text(render_html(grid, baseline))
    return grid, markdown, page
