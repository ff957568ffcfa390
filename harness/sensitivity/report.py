"""The sensitivity report: kill rate and false-alarm rate in one line, and ``sensitivity.{md,json}``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from harness.formats.markdown import code_span, table_row
from harness.sensitivity.runner import VERDICTS, Report


def _rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def summary_line(report: Report) -> str:
    """Kill rate, false-alarm rate, broken runs (counted apart: neither kills nor false alarms), counts and wall time
    in one line."""
    counts = ", ".join(f"{report.count(v)} {v}" for v in VERDICTS if v != "broken" and report.count(v))
    broken = report.count("broken")
    crashed = f", {broken} broken (red only through crashes, not kills)" if broken else ""
    return (
        f"kill rate {_rate(report.kill_rate())}, false-alarm rate {_rate(report.false_alarm_rate())}{crashed}"
        f"{f' ({counts})' if counts else ''} on {', '.join(report.targets)} in {report.wall_time_s:.0f} s"
    )


def _render_markdown(report: Report) -> str:
    """The report as a Markdown table, the failures first."""
    lines = [
        "# Sensitivity of the gate",
        "",
        f"Subject `{report.subject}`. {summary_line(report)}.",
        "",
    ]
    failures = [o for o in report.failures() if o.verdict != "broken"]
    if failures:
        lines += ["## Failures", ""]
        lines += [f"- {o.verdict}: `{o.mutant}` on {o.target}: {o.note or o.why}" for o in failures]
        lines.append("")
    broken = [o for o in report.outcomes if o.verdict == "broken"]
    if broken:
        lines += [
            "## Broken runs",
            "",
            "Cases went red, but only by crashing (an exception other than a contract assertion: in the harness, the "
            "subject or Megatron, an import, a fixture): not kills, not false alarms, and they fail the run until "
            "the crash is fixed.",
            "",
        ]
        for o in broken:
            lines.append(f"- `{o.mutant}` on {o.target}:")
            lines += [f"  - `{case}`: {raised}" for case, raised in o.crashed.items()]
        lines.append("")
    lines += [
        "| mutant | kind | target | expected family | caught by | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in report.outcomes:
        expected = "none (equivalent)" if o.equivalent else str(o.family)
        caught = "<br>".join(f"`{case}`" for case in o.caught_by)
        cells = [code_span(o.mutant), o.kind, o.target, expected, caught, o.verdict, o.note[:300]]
        lines.append(table_row(cells))
    return "\n".join(lines) + "\n"


def write_report(report: Report, directory: Path) -> tuple[Path, Path]:
    """``sensitivity.md`` and ``sensitivity.json`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    markdown, data = directory / "sensitivity.md", directory / "sensitivity.json"
    markdown.write_text(_render_markdown(report))
    document = {
        "targets": report.targets,
        "subject": report.subject,
        "wall_time_s": report.wall_time_s,
        "kill_rate": report.kill_rate(),
        "false_alarm_rate": report.false_alarm_rate(),
        "counts": {v: report.count(v) for v in VERDICTS},
        "broken": [
            {"mutant": o.mutant, "target": o.target, "crashed": o.crashed}
            for o in report.outcomes
            if o.verdict == "broken"
        ],
        "outcomes": [asdict(o) for o in report.outcomes],
    }
    data.write_text(json.dumps(document, indent=2) + "\n")
    return markdown, data
