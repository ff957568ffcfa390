"""The frameworks as published, installed and checked in target sessions: the second half of ``nox -s frameworks``.

Each of mcore-bridge, ms-swift and verl is declared in ``tests/published/<name>/megatron-conformance.toml`` with
``[subject] distribution`` (written by ``scan`` and edited by hand), installed from the package index into each
target's requirements venv (:mod:`harness.install.framework_install`) and run as a user runs it. Every replaced
symbol's verdict in ``replaced_symbols.json`` (checked applied where the declared apply binds it, else read from
source) is set against the tables written beforehand (``tests/published/expected/``), cell by cell as
``nox -s published`` does from the wheels alone. The reference subject's session on the same target, in the same
run and on a warm venv, is the time each framework's session, run a second time (venv and caches warm), must not
exceed. Writes its section of
``docs/frameworks.md``; exits 1 where a cell differs or a session is slower than the reference's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO_ROOT
from harness.install.framework_install import RECORD
from harness.targets.matrix import load_matrix
from tests.published_table import PUBLISHED, Cell, cells, differing, framework_table, table_of
from tests.pytest_helpers import run_target_cases, subject_python

DECLARATIONS = REPO_ROOT / "tests" / "published"
PAGE = REPO_ROOT / "docs" / "frameworks.md"
BEGIN, END = "<!-- published sessions: begin -->", "<!-- published sessions: end -->"
"""The markers of this section in the page, which ``tests.framework_table`` keeps when it rewrites the rest."""


def declaration_of(name: str) -> Path:
    return DECLARATIONS / name / "megatron-conformance.toml"


def session_run(
    name: str, session: str, work: Path, warm: bool = False
) -> tuple[dict[str, tuple[str, str]], float, list[str], str]:
    """The verdicts of ``name``'s session on ``session`` (venv built first, and with ``warm`` a session run first,
    neither timed: what a second run of the same venv finds cached), its time, its install report, and its
    outcome."""
    declaration = declaration_of(name)
    python = subject_python(session, [declaration])
    report = json.loads((python.parent.parent / RECORD).read_text())["report"]
    if warm:
        run_target_cases(session, ["cases"], work.with_name(f"{work.name}-warm"), declaration)
    start = time.monotonic()
    run = run_target_cases(session, ["cases"], work, declaration)
    seconds = time.monotonic() - start
    written = work / "replaced_symbols.json"
    records = json.loads(written.read_text())["symbols"] if written.is_file() else []
    found = {r["symbol"]: (r["verdict"], " ".join(r["findings"]), tuple(r.get("patched_at", ()))) for r in records}
    outcome = "green" if run.returncode == 0 else f"red: {', '.join(sorted(run.failed()))}"
    return found, seconds, report, outcome


def reference_seconds(session: str, work: Path) -> float:
    start = time.monotonic()
    run_target_cases(session, ["cases"], work)
    return time.monotonic() - start


def section(results: dict[str, dict[str, dict[str, Cell]]], heads: list[str], rows: list[str]) -> str:
    out = [
        BEGIN,
        "## Frameworks as published, installed and run",
        "",
        "Made by `nox -s frameworks` (after the table above): mcore-bridge, ms-swift and verl declared with `[subject]",
        "distribution` in `tests/published/<name>/` (each `starter.toml` is what `scan` wrote; the declaration beside",
        "it is that, edited by hand), installed from the index beside each target, each run in a target session. A",
        "cell sets the session's verdict of a replaced symbol (`replaced_symbols.json`) against the table written for",
        "it beforehand (`tests/published/expected/`); `nox -s published` compares the same tables from the wheels",
        "alone ([published.md](published.md)).",
        "",
        "| framework | target | session | seconds (reference's) | install |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    for name, by_symbol in results.items():
        out += framework_table(name, by_symbol, heads)
    return "\n".join([*out, END]) + "\n"


def write_section(text: str) -> None:
    page = PAGE.read_text()
    if BEGIN in page:
        page = page[: page.index(BEGIN)] + text + page[page.index(END) + len(END) + 1 :]
    else:
        page = page.rstrip("\n") + "\n\n" + text
    PAGE.write_text(page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s frameworks")
    parser.add_argument("--published", nargs="*", default=list(PUBLISHED), help="distributions (default: all)")
    parser.add_argument("--sessions", nargs="*", help="target sessions (default: every matrix target)")
    options = parser.parse_args(argv)
    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    targets = [t for t in matrix.targets if not options.sessions or t.session in options.sessions]
    results: dict[str, dict[str, dict[str, Cell]]] = {}
    rows, slow = [], []
    heads = [t.megatron.location.partition("==")[2] for t in targets]
    with tempfile.TemporaryDirectory(prefix="published-sessions-") as scratch:
        for target in targets:
            megatron = target.megatron.location.partition("==")[2]
            reference = reference_seconds(target.session, Path(scratch) / target.session / "reference")
            for name in options.published:
                work = Path(scratch) / target.session / name
                found, seconds, report, outcome = session_run(name, target.session, work, warm=True)
                for symbol, cell in cells(table_of(name), megatron, found).items():
                    results.setdefault(name, {}).setdefault(symbol, {})[megatron] = cell
                said = " ".join("; ".join(report).split()).replace("|", "\\|") or "nothing to report"
                rows.append(f"| {name} | {target.session} | {outcome} | {seconds:.0f} ({reference:.0f}) | {said} |")
                print(rows[-1], flush=True)
                if seconds > reference:
                    slow.append(f"{name} on {target.session}: {seconds:.0f} s, the reference's {reference:.0f} s")
    write_section(section(results, heads, rows))
    differ = differing(results)
    for line in [*differ, *slow]:
        print(line)
    print(f"wrote the published sessions' section of {PAGE.relative_to(REPO_ROOT)}")
    return 1 if differ or slow else 0


if __name__ == "__main__":
    sys.exit(main())
