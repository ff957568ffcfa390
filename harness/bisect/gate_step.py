"""One bisect step: the named cases of the gate on one build of megatron-core, as a one-target matrix of its own.

The build becomes the target ``megatron-bisect`` the way a candidate does (:mod:`harness.targets.candidate`): its
Python from its Requires-Python, the torch pin of the newest matrix target, the provider's call shapes from the
build itself where it ships ``megatron/training``, else from the matrix release at or below it. nox builds its venv
afresh for each build through uv's cache (``--install-only``), then runs the cases in it (``-R``); each child nox
writes to a log of its own, and a step says in one line why a build could not be run (it did not install, the
gate's own error).

Nightly builds ship ``megatron/core`` only. Where a build has no ``megatron/training`` and is not a matrix release
(whose call shapes the matrix records), the provider family is left out of its step, and the step says so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.bisect.run import ALL_CASES
from harness.bisect.search import GREEN, RED, SKIPPED, StepVerdict
from harness.formats import red_section
from harness.formats.environment import MATRIX_ENV_VAR, REPORTS_ENV_VAR
from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.formats.junit import JUnitCase, read_cases
from harness.plugin.families import FAMILIES, family_of_case
from harness.targets import candidate as candidates
from harness.targets.index_builds import Build
from harness.targets.matrix import MEGATRON_DISTRIBUTION, Target, venv_python

SESSION = "megatron-bisect"
_CALL_SITE = re.compile(r"\bmegatron/[\w/]+\.py:\d+")
_SYMBOL = re.compile(r"\bmegatron(?:\.\w+)+:[A-Za-z_][\w.]*\w")


@dataclass
class GateStep:
    """Runs steps for one bisect: where the checkout, its venvs and this bisect's reports lie, the matrix targets a
    build borrows its pins from, and the index the builds come from (``None``: pip's)."""

    root: Path
    envdir: Path
    reports: Path
    targets: tuple[Target, ...]
    index: str | None = None

    def __call__(self, build: Build, selection: list[str]) -> StepVerdict:
        started = time.monotonic()
        try:
            return self._run(build, selection, started)
        except candidates.CandidateError as err:
            return StepVerdict(SKIPPED, reason=str(err), seconds=time.monotonic() - started)

    def _run(self, build: Build, selection: list[str], started: float) -> StepVerdict:
        entry = self._entry(build)
        matrix = candidates.write_matrix(entry, self.reports / "matrix.yaml")
        log = self.reports / "steps" / f"{build.version}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if self._nox(["-s", SESSION, "--install-only"], matrix, log) != 0:
            return StepVerdict(SKIPPED, reason=f"did not install: {_install_reason(log)}", seconds=_since(started))
        python = venv_python(self.envdir, SESSION)
        derived, why = candidates.derived_contract(python, self.root)
        if derived is not None:
            candidates.write_matrix(candidates.with_derived_contract(entry, derived)[0], matrix)
        selection, left_out = self._without_provider(build, python, selection)
        if not selection:
            return StepVerdict(SKIPPED, reason=left_out, seconds=_since(started))
        report_dir = self.reports.parent / SESSION
        (report_dir / "junit.xml").unlink(missing_ok=True)
        status = self._nox(["-R", "-s", SESSION, "--", *selection], matrix, log, append=True)
        if status == GATE_ERROR_STATUS:
            return StepVerdict(SKIPPED, reason=f"the gate's own error (see {log})", seconds=_since(started))
        cases = read_cases(report_dir / "junit.xml")
        if not cases:
            return StepVerdict(SKIPPED, reason=f"no case ran (exit {status}; see {log})", seconds=_since(started))
        red = tuple(sorted(c.nodeid for c in cases if c.verdict == "failed"))
        details = red_details([c for c in cases if c.verdict == "failed"])
        details["notes"] = [note for note in (left_out, why) if note]
        return StepVerdict(RED if red else GREEN, red=red, seconds=_since(started), details=details)

    def _entry(self, build: Build) -> dict:
        spec = f"{MEGATRON_DISTRIBUTION}=={build.version}"
        requires = next((f.requires_python for f in build.files if f.requires_python), None)
        found = candidates.Candidate(spec, "pypi", spec, build.version, _requires_python(requires))
        python = candidates.pick_python(found)
        shapes = candidates.release_at_or_below(build.version, self.targets)
        expected = self.reports / "expected_failures.txt"
        entry = candidates.matrix_entry(found, python, self.targets[-1], expected, shapes)
        return {**entry, "session": SESSION, "description": f"bisect step on {spec}"}

    def _without_provider(self, build: Build, python: Path, selection: list[str]) -> tuple[list[str], str]:
        """``selection`` less the provider family where the build cannot judge it, and the line that says so."""
        if _ships_training(python) or _is_matrix_release(build, self.targets):
            return selection, ""
        why = f"{build.version} ships no megatron/training: the provider family is left out of this step"
        if selection == [ALL_CASES]:
            provider = [f.case_file for f in FAMILIES if f.role == "provider"]
            return [ALL_CASES, *(f"--deselect={path}" for path in provider)], why
        kept = [case for case in selection if not _is_provider(case)]
        return kept, why if len(kept) < len(selection) else ""

    def _nox(self, arguments: list[str], matrix: Path, log: Path, append: bool = False) -> int:
        environment = {**os.environ, MATRIX_ENV_VAR: str(matrix), REPORTS_ENV_VAR: str(self.reports.parent)}
        environment.update(_index_environment(self.index))
        command = [sys.executable, "-m", "nox", "-f", str(self.root / "noxfile.py"), *arguments]
        with log.open("a" if append else "w") as stream:
            stream.write("$ " + " ".join(command) + "\n")
            stream.flush()
            return subprocess.run(
                command, cwd=self.root, env=environment, stdout=stream, stderr=subprocess.STDOUT
            ).returncode


def _requires_python(value: str | None) -> SpecifierSet | None:
    try:
        return SpecifierSet(value) if value else None
    except InvalidSpecifier:
        return None


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


def _is_provider(nodeid: str) -> bool:
    family = family_of_case(nodeid)
    return family is not None and family.role == "provider"


def _ships_training(python: Path) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('megatron.training') is None)"
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def _is_matrix_release(build: Build, targets: tuple[Target, ...]) -> bool:
    return any(target.pinned_version() == build.version for target in targets)


def _index_environment(index: str | None) -> dict[str, str]:
    """How the child nox's installs are pointed at ``index``: a folder is added to pip's find-links, a URL replaces
    its index."""
    if index is None:
        return {}
    folder = Path(index.removeprefix("file://"))
    if folder.is_dir():
        links = " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS", ""), str(folder)]))
        return {"PIP_FIND_LINKS": links}
    return {"PIP_INDEX_URL": index}


def _install_reason(log: Path) -> str:
    """What the installer said went wrong: uv's ``error:`` line, the causes after it and the last line the failed
    build wrote to its stderr; else the last line nox did not write itself."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    own = [line for line in lines if not line.startswith(("nox >", "$ "))]
    for index, line in enumerate(own):
        if line.startswith(("error:", "ERROR")):
            rest = own[index + 1 :]
            said = [line, *[cause for cause in rest[:3] if cause.startswith("cause:")][:2]]
            if "[stderr]" in rest:
                block = rest[rest.index("[stderr]") + 1 :]
                block = block[: next((i for i, b in enumerate(block) if b.startswith("hint:")), len(block))]
                said += block[-1:]
            return " ".join(said)[:500]
    return (own or lines or ["(no output)"])[-1][:500]


def red_details(reds: list[JUnitCase]) -> dict[str, list[str]]:
    """What a report needs of red cases: the Megatron symbols their red sections and messages name and the Megatron
    call sites their messages cite, each once."""
    symbols: list[str] = []
    call_sites: list[str] = []
    for case in reds:
        section, _ = red_section.parse(case.text)
        named = [section.symbol] if section is not None and _SYMBOL.fullmatch(section.symbol) else []
        for symbol in [*named, *_SYMBOL.findall(case.text)]:
            if symbol not in symbols:
                symbols.append(symbol)
        for site in _CALL_SITE.findall(case.text):
            if site not in call_sites:
                call_sites.append(site)
    return {"symbols": symbols, "call_sites": call_sites}
