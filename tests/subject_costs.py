"""What a declared framework's session costs next to the reference subject's, in the same warm run.

``nox -s costs -- [targets] [--frameworks NAME ...]`` (default: every framework of ``tests/frameworks/`` on
megatron-0.15 and megatron-0.16) runs the reference subject first and then each framework in one warm run per target
(``CI=true``, as CI and the frameworks table run them), and prints one Markdown table per target: each subject's
session time, its ratio to the reference's, and its slowest families. The figures go in ``docs/speed.md``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import REPO_ROOT
from harness.formats.environment import REFERENCE_SUBJECT as REFERENCE
from tests.e2e.framework_verdicts import EXPECTED
from tests.framework_table import declaration, option, run_warm

TARGETS = ("megatron-0.15", "megatron-0.16")


def run_target(session: str, names: Sequence[str], reports: Path) -> dict[str, dict]:
    """The reference and ``names`` on ``session`` in one warm run; each one's ``summary.json``."""
    specs = [REFERENCE, *(str(declaration(name).relative_to(REPO_ROOT)) for name in names)]
    folders = run_warm(session, specs, reports)
    return {
        name: json.loads((folder / "summary.json").read_text())
        for name, folder in zip(["reference", *names], folders, strict=True)
    }


def table(session: str, summaries: dict[str, dict]) -> str:
    reference = float(summaries["reference"]["wall_time_s"])
    head = "| subject | session s | / reference | slowest families (s) |"
    lines = [f"### {session}", "", head, "|---|---:|---:|---|"]
    for name, summary in summaries.items():
        seconds = float(summary["wall_time_s"])
        families = sorted((summary.get("family_seconds") or {}).items(), key=lambda item: -item[1])[:3]
        slowest = ", ".join(f"{family} {value:.0f}" for family, value in families)
        lines.append(f"| `{name}` | {seconds:.0f} | {seconds / reference:.2f} | {slowest} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(argv if argv is not None else sys.argv[1:])
    names = option(arguments, "--frameworks") or list(EXPECTED)
    unknown = sorted(set(names) - set(EXPECTED))
    if unknown:
        raise SystemExit(f"nox -s costs: no framework named {', '.join(unknown)} (known: {', '.join(EXPECTED)})")
    targets = [a for a in arguments if a not in {"--frameworks", *names}] or list(TARGETS)
    reports = REPO_ROOT / "reports" / "costs"
    for session in targets:
        print(table(session, run_target(session, names, reports)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
