"""Running the real gate on each mutant and judging it: the target's interpreter, the one case command
(:mod:`harness.plugin.command`), the case files of the family that must catch the mutant, verdicts read back from
JUnit. The kill rate counts mutants caught by a red case; a run that broke judges nothing and is an error.
"""

from __future__ import annotations

import itertools
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.plugin.command import CaseRun, case_command, run_cases
from harness.plugin.families import MUTABLE, family_of_case
from harness.sensitivity.catalogue import Mutant
from harness.sensitivity.mutate import (
    MutationError,
    build_mutant_package,
    environment,
    installed_package,
    mutated_sources,
    verify_loaded,
)

VERDICTS = ("killed", "survived", "false alarm", "ok", "not applicable", "error")
# A family file takes 10-150 s here; a mutant's run stops at its first red example. Past this limit the run is
# reported as an error.
_CASE_TIMEOUT_S = 900


def _family_name(nodeid: str) -> str:
    owner = family_of_case(nodeid)
    return owner.name if owner else "?"


def _run_mutant(
    python: Path,
    target: str,
    selection: list[str],
    subject: str,
    site: Path | None,
    report_dir: Path,
    first_failure: bool = False,
) -> CaseRun:
    """Run ``selection`` in the target venv of ``python``, with the mutated copy (if any) first on the path.

    With ``first_failure`` the run stops at the first red case and hypothesis does not shrink: enough to know that a
    mutant is caught. Without it (equivalent mutants) every case runs its full ``ci`` profile, as the gate does.
    """
    profile = "fail-fast" if first_failure else "ci"
    options = ["-x", f"--subject={subject}"] if first_failure else [f"--subject={subject}"]
    command = case_command(target, report_dir, selection, python=python, profile=profile, options=options)
    return run_cases(command, environment(site), timeout=_CASE_TIMEOUT_S)


@dataclass
class Outcome:
    """One row of the report: a mutant on a target."""

    mutant: str
    kind: str
    target: str
    family: str | None
    equivalent: bool
    verdict: str
    caught_by: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    why: str = ""


def _outcome(mutant: Mutant, target: str, verdict: str, **details: Any) -> Outcome:
    return Outcome(mutant.id, mutant.kind, target, mutant.family, mutant.equivalent, verdict, why=mutant.why, **details)


def judge(mutant: Mutant, run: CaseRun) -> tuple[str, str]:
    """Verdict and note for ``mutant`` from its (last) run.

    Killed: a case of the mutant's own family failed; if only other families caught it (the second run, every family
    but smoke) it is still killed, with a note, since the gate went red but the declared contract did not say why.
    An equivalent mutant is a false alarm as soon as any case fails. A run that broke judges nothing: error.
    """
    if run.broken():
        return "error", f"pytest exit {run.returncode}: {run.output}"
    if mutant.equivalent:
        return ("false alarm" if run.failed() else "ok"), ""
    if not run.failed():
        return "survived", ""
    families = sorted({_family_name(case) for case in run.failed()})
    if mutant.family in families:
        return "killed", ""
    return "killed", f"caught only by {', '.join(families)}, not by its own family"


def _evaluate(mutant: Mutant, target: str, python: Path, package: Path, subject: str, workdir: Path) -> Outcome:
    """Run the gate on one mutant: its family's cases, then every other family if those stayed green."""
    if target not in mutant.targets:
        return _outcome(mutant, target, "not applicable")
    started = time.monotonic()
    site = None
    if mutant.kind == "megatron":
        site = build_mutant_package(mutant, package, workdir)
        verify_loaded(mutant, python, site)
    chosen = mutant.subject or subject
    must_fail = not mutant.equivalent
    run = _run_mutant(python, target, mutant.selection(), chosen, site, workdir, first_failure=must_fail)
    if not run.broken() and must_fail and not run.failed():
        others = [f.case_file for f in MUTABLE if f.name != mutant.family]
        run = _run_mutant(python, target, others, chosen, site, workdir, first_failure=True)
    verdict, note = judge(mutant, run)
    seconds = round(time.monotonic() - started, 1)
    return _outcome(mutant, target, verdict, caught_by=sorted(run.failed()), note=note, seconds=seconds)


# --- the whole catalogue ------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Every outcome of a sensitivity run, with its rates."""

    targets: list[str]
    subject: str
    outcomes: list[Outcome]
    wall_time_s: float

    def count(self, verdict: str) -> int:
        return sum(1 for o in self.outcomes if o.verdict == verdict)

    def kill_rate(self) -> float | None:
        """Killed over all applicable mutants that must be caught (a survivor or a broken run counts against)."""
        judged = [o for o in self.outcomes if not o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "killed" for o in judged) / len(judged) if judged else None

    def false_alarm_rate(self) -> float | None:
        """False alarms over all applicable equivalent mutants."""
        judged = [o for o in self.outcomes if o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "false alarm" for o in judged) / len(judged) if judged else None

    def failures(self) -> list[Outcome]:
        """What makes the run red: survivors, false alarms and broken runs."""
        return [o for o in self.outcomes if o.verdict in ("survived", "false alarm", "error")]


def _check_catalogue(mutants: list[Mutant], packages: dict[str, Path]) -> None:
    """Make every applicable megatron mutant's edits in memory, so a stale edit fails before anything runs."""
    for target, package in packages.items():
        for mutant in mutants:
            if mutant.kind == "megatron" and target in mutant.targets:
                mutated_sources(mutant, package)


def run_sensitivity(
    mutants: list[Mutant],
    pythons: dict[str, Path],
    subject: str,
    workers: int,
    progress: Callable[[str], object] = print,
) -> Report:
    """Every mutant on every target in ``pythons`` (session name to interpreter), ``workers`` runs at a time."""
    started = time.monotonic()
    packages = {target: installed_package(python) for target, python in pythons.items()}
    _check_catalogue(mutants, packages)
    jobs = [(m, t) for t in pythons for m in mutants]
    # Equivalent mutants run every family and take longest: start them first so the pool ends evenly.
    jobs.sort(key=lambda job: (not job[0].equivalent, job[0].kind != "megatron"))
    finished = itertools.count(1)

    def job(mutant: Mutant, target: str) -> Outcome:
        with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as workdir:
            try:
                outcome = _evaluate(mutant, target, pythons[target], packages[target], subject, Path(workdir))
            except (MutationError, subprocess.TimeoutExpired) as err:
                outcome = _outcome(mutant, target, "error", note=str(err))
        done = next(finished)
        if outcome.verdict != "not applicable":
            cases = f" ({len(outcome.caught_by)} failing cases)" if outcome.caught_by else ""
            progress(f"[{done}/{len(jobs)}] {outcome.verdict}: {mutant.id} on {target}{cases} {outcome.seconds} s")
        return outcome

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(job, mutant, target) for mutant, target in jobs]
        outcomes = [future.result() for future in futures]
    order = {m.id: i for i, m in enumerate(mutants)}
    outcomes.sort(key=lambda o: (order[o.mutant], o.target))
    return Report(list(pythons), subject, outcomes, round(time.monotonic() - started, 1))
