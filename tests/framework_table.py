"""``nox -s frameworks -- [targets]``: every framework in ``tests/frameworks/`` on each target, against the verdicts
written for it beforehand (``tests/e2e/framework_verdicts.py``), as the table in ``docs/frameworks.md``.

Each target is one warm run of every framework (the target session's several-subjects run, its requirement venv
shared by all), so the Megatron imports are paid once per target. A cell says what the run found: green, or the
cases red; the families not declared; the count of advisories; and whether that is what was expected. Any cell not
as expected makes the command exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import REPO_ROOT
from harness.formats.junit import read_cases
from harness.plugin.command import subject_folder
from tests.e2e.framework_verdicts import EXPECTED, TARGETS, Expected
from tests.published_sessions import BEGIN, END

FRAMEWORKS = REPO_ROOT / "tests" / "frameworks"
PAGE = REPO_ROOT / "docs" / "frameworks.md"
COMMAND = "nox -s frameworks"


@dataclass(frozen=True)
class Observed:
    """One framework's run on one target."""

    reds: frozenset[str]
    not_declared: frozenset[str]
    advisories: int
    seconds: float

    def matches(self, expected: Expected) -> bool:
        return self.reds == set(expected.reds) and self.not_declared == {family for family, _ in expected.not_declared}


def declaration(name: str) -> Path:
    return FRAMEWORKS / name / "megatron-conformance.toml"


def run_target(session: str, names: Sequence[str], reports: Path) -> dict[str, Observed]:
    """Every framework of ``names`` on ``session`` in one warm run; each one's verdicts."""
    specs = [str(declaration(name).relative_to(REPO_ROOT)) for name in names]
    folders = run_warm(session, specs, reports)
    return {name: observed(folder) for name, folder in zip(names, folders, strict=True)}


def run_warm(session: str, specs: Sequence[str], reports: Path) -> list[Path]:
    """The subjects ``specs`` on ``session`` in one warm run under ``reports`` (``CI=true``, venvs reused): each
    one's report folder, in order."""
    environment = {
        **os.environ,
        "CI": "true",
        "MEGATRON_CONFORMANCE_REPORTS": str(reports),
        "MEGATRON_CONFORMANCE_SUBJECT": ",".join(specs),
    }
    nox = [sys.executable, "-m", "nox", "-f", str(REPO_ROOT / "noxfile.py"), "--reuse-venv=yes", "-s", session]
    subprocess.run(nox, cwd=REPO_ROOT, env=environment, check=False)
    if len(specs) == 1:  # one subject reports in the session's own folder
        return [reports / session]
    return [subject_folder(reports / session, n, spec) for n, spec in enumerate(specs, 1)]


def observed(folder: Path) -> Observed:
    """What one subject folder of a several-subjects run recorded."""
    summary = json.loads((folder / "summary.json").read_text())
    reds = frozenset(case.name or case.module for case in read_cases(folder / "junit.xml") if case.verdict == "failed")
    not_declared = frozenset(family for family, why in (summary.get("not_run") or {}).items() if "not declared" in why)
    return Observed(reds, not_declared, len(summary["advisories"]), float(summary.get("wall_time_s") or 0))


def cell(found: Observed | None, expected: Expected) -> str:
    if found is None:
        return "not run"
    verdict = "❌ " + ", ".join(f"`{red}`" for red in sorted(found.reds)) if found.reds else "✅ green"
    extra = [f"{found.advisories} advisories"] if found.advisories else []
    extra += [f"not declared: {', '.join(sorted(found.not_declared))}"] if found.not_declared else []
    mark = "as expected" if found.matches(expected) else "**NOT AS EXPECTED**"
    return f"{verdict}<br><sub>{' · '.join([*extra, mark])}, {found.seconds:.0f} s</sub>"


def render(results: dict[str, dict[str, Observed]], targets: Sequence[str], only: Sequence[str] | None = None) -> str:
    rerun = (
        f" Last run for {', '.join(f'`{name}`' for name in only)} alone (`{COMMAND} -- --only {' '.join(only)}`); the"
        " other rows are from the run before."
        if only
        else ""
    )
    lines = [
        "# Frameworks on every target",
        "",
        f"Made by `{COMMAND} -- {' '.join(targets)}` (one warm run per target, every framework in",
        "[`tests/frameworks/`](../tests/frameworks/) checked from its declaration), against the verdicts written",
        "beforehand in [`tests/e2e/framework_verdicts.py`](../tests/e2e/framework_verdicts.py), where every expected",
        "red names the Megatron behaviour behind it. A red names the cases; advisories are listed by each run's",
        f"report, never expected here. Seconds are each framework's session time in the shared run.{rerun}",
        "",
        "| framework | " + " | ".join(targets) + " |",
        "|---|" + "---|" * len(targets),
    ]
    for name in EXPECTED:
        cells = [cell(results.get(session, {}).get(name), EXPECTED[name][session]) for session in targets]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    reasons = sorted(
        {(name, family, why) for name in EXPECTED for e in EXPECTED[name].values() for family, why in e.not_declared}
    )
    if reasons:
        lines += ["", "Not declared, and why:", ""]
        lines += [f"- `{name}`, {family}: {why}." for name, family, why in reasons]
    return "\n".join(lines) + "\n"


def kept_section() -> str:
    """The page's section of the frameworks as published (``tests.published_sessions``), kept as it is."""
    page = PAGE.read_text() if PAGE.is_file() else ""
    if BEGIN not in page:
        return ""
    return "\n" + page[page.index(BEGIN) : page.index(END) + len(END)] + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``[--rerun T ...] [--only NAME ...] [targets]``: run every framework on every target (default the four) and
    write the page. With ``--rerun``, run only the targets named after it; with ``--only``, only the frameworks named
    after it (in a report folder of their own). The other cells are read from the report folders of an earlier run,
    where each framework has its place in ``EXPECTED``'s order (new frameworks go last)."""
    arguments = list(argv if argv is not None else sys.argv[1:])
    rerun, only = option(arguments, "--rerun"), option(arguments, "--only")
    options = {"--rerun", "--only", *(rerun or []), *(only or [])}
    targets = [a for a in arguments if a not in options] or list(TARGETS)
    reports = REPO_ROOT / "reports" / "frameworks"
    names = list(EXPECTED)
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise SystemExit(f"{COMMAND}: no framework named {', '.join(unknown)} in EXPECTED (known: {', '.join(names)})")
    results: dict[str, dict[str, Observed]] = {}
    for session in targets:
        if rerun is not None and session not in rerun:
            results[session] = _earlier(session, names, reports)
        elif only:
            results[session] = {**_earlier(session, names, reports), **run_target(session, only, reports / "only")}
        else:
            results[session] = run_target(session, names, reports)
    PAGE.write_text(render(results, targets, only) + kept_section())
    unexpected = [
        f"{name} on {session}"
        for session, found in results.items()
        for name, observed_run in found.items()
        if not observed_run.matches(EXPECTED[name][session])
    ]
    missing = [f"{name} on {session}" for session, found in results.items() for name in names if name not in found]
    summary = ", ".join(unexpected) or "none"
    print(f"{PAGE}: {len(EXPECTED)} frameworks x {len(targets)} targets; not as expected: {summary}")
    if missing:
        print(f"not run (no earlier report): {', '.join(missing)}")
    return 1 if unexpected else 0


def option(arguments: list[str], flag: str) -> list[str] | None:
    """The values after ``flag`` up to the next flag; None when ``flag`` is absent."""
    if flag not in arguments:
        return None
    values = []
    for value in arguments[arguments.index(flag) + 1 :]:
        if value.startswith("--"):
            break
        values.append(value)
    return values


def _earlier(session: str, names: Sequence[str], reports: Path) -> dict[str, Observed]:
    """The verdicts an earlier run left for ``session``; a framework it did not run is left out (its cell reads
    "not run")."""
    found = {}
    for n, name in enumerate(names, 1):
        folder = subject_folder(reports / session, n, str(declaration(name).relative_to(REPO_ROOT)))
        if (folder / "summary.json").exists():
            found[name] = observed(folder)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
