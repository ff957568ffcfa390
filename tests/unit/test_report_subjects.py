"""The report of several subjects: labels that tell the subjects apart, a one-line headline, the comparison with a
baseline first, findings and notes said once where the subjects agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.reports.comparison import compare
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.reports.results import ReportError, Subject, collect, headline, subject_labels
from tests.report_helpers import comparison, findings
from tests.several_subjects import (
    BLOCKER_CASE,
    FOUR,
    IMPORT_CASE,
    KEYWORDS_CASE,
    LABELS,
    SHARED_NOTE,
    XFAIL_CASE,
    four_subject_reports,
    four_targets,
)

LEGACY, MODERN, KESTREL, HERON = (LABELS[name] for name in ("legacyrl", "modernrl", "kestrel", "heron"))


@pytest.fixture
def grid(tmp_path: Path):
    return collect(four_subject_reports(tmp_path / "reports"), four_targets())


def _pair(pairs, target: str, other: str):
    return next(pair for pair in pairs if pair.target == target and pair.other == other)


def _cases(entries) -> set[tuple[str, str]]:
    return {(entry.kind, entry.case.rpartition("::")[2]) for entry in entries}


def test_subjects_are_named_by_label_never_by_folder(grid) -> None:
    assert [matrix.label for matrix in grid.matrices] == [LEGACY, MODERN, KESTREL, HERON]
    assert {run.session for run in grid.targets if run.target_session == "megatron-0.15"} == {
        f"megatron-0.15 ({label})" for label in LABELS.values()
    }
    assert "megatron-conformance)" not in render_markdown(grid).replace("(megatron-conformance.toml)", "")


def test_equal_labels_get_the_runs_position_and_nothing_else_does() -> None:
    one, two, three = (Subject(f"{root}/megatron-conformance.toml", "declaration", "pkg (x.toml)") for root in "abc")
    three = Subject("c/megatron-conformance.toml", "declaration", "other (x.toml)")
    assert list(subject_labels([one, two, three]).values()) == ["pkg (x.toml) #1", "pkg (x.toml) #2", "other (x.toml)"]


def test_the_headline_is_one_line_of_targets_subjects_and_reds(grid) -> None:
    assert headline(grid) == (
        f"4 targets · 4 subjects · 8 reds: {LEGACY} 6 (megatron-0.13, megatron-0.15, megatron-0.16, megatron-0.19), "
        f"{KESTREL} 2 (megatron-0.13, megatron-0.16)."
    )


def test_each_subject_is_compared_with_the_first_per_target(grid) -> None:
    pairs = compare(grid)
    assert [(p.target, p.other) for p in pairs] == [(t, o) for t in FOUR for o in (MODERN, KESTREL, HERON)]
    assert {pair.baseline for pair in pairs} == {LEGACY}
    upgrade = _pair(pairs, "megatron-0.16", MODERN)
    assert _cases(upgrade.fixed) == {("red", IMPORT_CASE), ("red", KEYWORDS_CASE)}
    assert upgrade.new == upgrade.shared == []
    assert upgrade.advisories == (1, 0)
    assert all(
        entry.repro.startswith("MEGATRON_CONFORMANCE_SUBJECT=tests/frameworks/legacyrl/") for entry in upgrade.fixed
    )
    assert all(entry.repro.split(" -s ")[1].startswith("megatron-0.16 -- ") for entry in upgrade.fixed)
    kestrel = _pair(pairs, "megatron-0.16", KESTREL)
    assert _cases(kestrel.fixed) == {("red", IMPORT_CASE)} and _cases(kestrel.shared) == {("red", KEYWORDS_CASE)}
    blocked = _pair(pairs, "megatron-0.13", KESTREL)
    assert _cases(blocked.new) == {("red", BLOCKER_CASE), ("blocked", "api-fingerprint")}
    expected = _pair(pairs, "megatron-0.15", HERON)
    assert _cases(expected.new) == {("xfail", XFAIL_CASE)}
    assert "tests/frameworks/heron/" in expected.new[0].repro and expected.new[0].anchor is None
    assert _pair(pairs, "megatron-0.15", MODERN).same is False


def test_a_named_baseline_replaces_the_first_and_an_unknown_one_is_refused(grid) -> None:
    pairs = compare(grid, MODERN)
    assert {pair.baseline for pair in pairs} == {MODERN}
    assert _cases(_pair(pairs, "megatron-0.16", LEGACY).new) == {("red", IMPORT_CASE), ("red", KEYWORDS_CASE)}
    with pytest.raises(
        ReportError, match=re.escape(f"--baseline 'nobody' names no subject of this report (its subjects: '{LEGACY}'")
    ):
        compare(grid, "nobody")


def test_a_subject_that_did_not_run_on_a_target_is_not_compared_there(tmp_path: Path) -> None:
    reports = four_subject_reports(tmp_path / "reports")
    for path in (reports / "megatron-0.15" / "3-megatron-conformance").iterdir():
        path.unlink()
    pair = _pair(compare(collect(reports, four_targets())), "megatron-0.15", KESTREL)
    assert pair.missing == [KESTREL] and pair.fixed == pair.new == pair.shared == []
    _, headers, rows = comparison(render_markdown(collect(reports, four_targets())))
    assert rows[f"`{KESTREL}`"][headers.index("megatron-0.15")] == "not compared"


def test_the_comparison_comes_first_in_both_renderings(grid) -> None:
    markdown, page = render_markdown(grid), render_html(grid)
    lines = markdown.splitlines()
    assert lines[2] == headline(grid) and lines[4].startswith("### Comparison: each subject against ")
    assert markdown.index("### Comparison") < markdown.index("### Findings") < markdown.index("### Summary")
    assert page.index("<h2>Comparison") < page.index("<h2>Findings") < page.index("<h2>Summary")
    baseline, headers, rows = comparison(markdown)
    assert baseline == f"`{LEGACY}`" and headers == list(FOUR)
    assert list(rows) == [f"`{label}`" for label in (MODERN, KESTREL, HERON)]
    assert rows[f"`{MODERN}`"][2] == "✅ 2 fixed · 🟠 advisories 1 → 0"
    assert rows[f"`{KESTREL}`"] == [
        "❌ 2 new · ✅ 1 fixed · 🟠 advisories 1 → 2",
        "✅ 1 fixed · 🟠 advisories 1 → 2",
        "✅ 1 fixed · 1 shared · 🟠 advisories 1 → 2",
        "✅ 2 fixed · 🟠 advisories 1 → 2",
    ]
    assert comparison(render_markdown(grid, baseline=MODERN))[2][f"`{HERON}`"][0] == "no change"
    changes = markdown[
        markdown.index("<details open><summary><b>New against the baseline</b>, each with its repro line (3)") :
    ]
    new = changes.index("· **new** red [")
    assert (
        "MEGATRON_CONFORMANCE_SUBJECT=tests/frameworks/kestrel/megatron-conformance.toml"
        in changes[new:].split("\n")[0]
    )
    assert changes.index("### Findings") > changes.index("<details><summary><b>Fixed and shared</b>") > new


def test_findings_alike_across_subjects_are_said_once_per_target(grid) -> None:
    headers, rows = findings(render_markdown(grid))
    assert headers == list(FOUR), "one column per target, not per subject"
    largest = next(cells for label, cells in rows.items() if label.startswith("largest-buffer population"))
    assert largest == ["4 MiB → 128 KiB"] * 4
    steps = {
        label: cells for label, cells in rows.items() if label.startswith("real step (GPTModel TP 2 + SP, world 2")
    }
    assert {label.rpartition(" · ")[2]: cells[0] for label, cells in steps.items()} == {
        f"`{label}`": f"896 B → {'8' if label == HERON else '4'} B" for label in (LEGACY, MODERN, KESTREL, HERON)
    }, "a finding the subjects disagree on gets a row per subject"


def test_notes_are_said_once_with_where_they_apply(grid) -> None:
    markdown = render_markdown(grid)
    assert markdown.count(SHARED_NOTE) == 1
    assert (
        f"- megatron-0.13, megatron-0.15, megatron-0.16: did not run: equivalence (GTP step): {SHARED_NOTE}" in markdown
    )
    assert markdown.count("blocked: api-fingerprint: the subject cannot be loaded") == 1
    assert f"- megatron-0.13 ({KESTREL}): blocked: api-fingerprint" in markdown
