"""Running the real gate on each mutant and judging it: the target's interpreter, the one case command
(:mod:`harness.plugin.command`), the case files of the family that must catch the mutant, verdicts read back from
JUnit. Mutants of one target, kind and first selection share warm runs (:mod:`harness.plugin.warm_sessions`): a
subject mutant is a subject of the run, a Megatron mutant is imported again in its forked session
(:mod:`harness.targets.in_place_mutant`); only a Megatron mutant that edits other files than modules runs on a copied
package (:mod:`harness.sensitivity.mutate`).

The kill rate counts mutants caught by a contract assertion; a case that went red any other way (the harness crashed,
an import or a fixture failed) judges nothing and makes the mutant "broken"; a run that broke as a whole judges
nothing and is an error.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.formats.junit import JUnitCase
from harness.formats.progress import Progress
from harness.formats.summary import SummaryError, read_summary
from harness.plugin.command import CaseRun, case_command, run_cases, run_options, subject_folder, subject_runs
from harness.plugin.failure import parse_head
from harness.plugin.families import FAMILIES, MUTABLE, family_of_case
from harness.plugin.warm_client import WarmServerError, run_warm
from harness.ranks.pool import RankTimeout
from harness.sensitivity.catalogue import Mutant
from harness.sensitivity.mutate import (
    MutationError,
    build_mutant_package,
    environment,
    installed_package,
    mutated_sources,
    verify_loaded,
)
from harness.targets.in_place_mutant import can_run_in_place

VERDICTS = ("killed", "survived", "broken", "false alarm", "ok", "not applicable", "error")
# A family file takes 10-150 s here; a mutant's run stops at its first red example. Past this limit the run is
# reported as an error.
_CASE_TIMEOUT_S = 900
_WARM_RUN_MOST = 4
"""Mutants per warm run: their outcomes are known (and the progress line printed) when the run ends. An equivalent
mutant's sessions take about a minute each; the imports a warm run saves cost about 5 s of CPU once."""


def _family_name(nodeid: str) -> str:
    owner = family_of_case(nodeid)
    return owner.name if owner else "?"


# --- which reds are contract verdicts -------------------------------------------------------------------------------
#
# pytest 9 writes no ``type`` attribute on ``<failure>``/``<error>``: the exception's type heads the ``message``
# attribute, as ``format_exception_only`` prints it (builtins bare, others module-qualified):
#   AssertionError: [megatron-0.15] chunk-splitting: property 'partition' violated by ...   (hypothesis keeps it)
#   harness.ranks.pool.RankTimeout: ... / RankRaised / RankDied                             (the rank pool)
#   Failed: [megatron-0.15] chunk-splitting: property 'budget validation' violated ...     (pytest.fail)
#   assert 1 == 2                                              (a rewritten bare assert: pytest strips the type)
#   ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions)   (sub-exceptions only in the text)
#   failed on setup with "RuntimeError: ..."  /  failed on teardown with "..."  /  collection failure   (<error>)
# A ``type`` attribute, where another writer sets one, is used as it is.

_ASSERTION_TYPES = frozenset({"AssertionError", f"{RankTimeout.__module__}.{RankTimeout.__qualname__}"})
"""Exception types whose failure is a contract verdict: ``assert`` with its ``contract_failure`` message, and a rank
blocked in a collective a peer never entered (a subject that skips or adds a collective). A rank that raised or died
is a crash: the equivalence task reports the subject's own exceptions as problems, so what reaches the pool is the
harness, or upstream, failing; it proves nothing about the contract."""
_FAIL_TYPES = frozenset({"Failed", "_pytest.outcomes.Failed"})
"""``pytest.fail``: a contract verdict only when its message opens with ``contract_failure``'s head."""
_HEADED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?$", re.DOTALL)
_SINGLE_IN_GROUP = re.compile(r"\[single exception in [\w.]+\]$")
_GROUP_TRACEBACK = "Exception Group Traceback (most recent call last)"
_SUB_EXCEPTION = re.compile(r"^[ \t]*\| (?P<type>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?$", re.MULTILINE)
_TEARDOWN = 'failed on teardown with "'


def _exception_of(line: str) -> tuple[str, str]:
    """Type and message of ``Type: message`` (``assert ...`` is a rewritten AssertionError); no type: ``("", line)``."""
    if line == "assert" or line.startswith("assert "):
        return "AssertionError", line
    match = _HEADED.match(line)
    return (match["type"], match["message"] or "") if match else ("", line)


def raised_by(case: JUnitCase) -> list[tuple[str, str]]:
    """The exceptions that turned ``case`` red, as (type, message): one, or each sub-exception of a group (the
    group's own line included). A teardown error gives the exception inside its reason; an error in setup or
    collection gives ``("", reason)``. Nothing for a case that is not red."""
    detail = case.detail
    if case.verdict != "failed" or detail is None:
        return []
    message = (detail.get("message") or "").strip()
    text = detail.text or ""
    if detail.tag == "error":
        if not message.startswith(_TEARDOWN):
            return [("", message)]
        message = message.removeprefix(_TEARDOWN).rstrip('"')
    head = message.split("\n", 1)[0]
    if _GROUP_TRACEBACK in text or _SINGLE_IN_GROUP.search(head):
        return [(m["type"], m["message"] or "") for m in _SUB_EXCEPTION.finditer(text)] or [("", head)]
    declared = detail.get("type")
    if declared:
        return [(declared, message.removeprefix(f"{declared}:").strip())]
    return [_exception_of(message)]


def _contract_head(message: str, target: str) -> bool:
    """Whether ``message`` opens as ``contract_failure`` words a verdict: ``[<target>] <family>: ...``."""
    head = parse_head(message)
    return head is not None and head[0] == target and any(head[1] == family.name for family in FAMILIES)


def is_contract_verdict(case: JUnitCase, target: str) -> bool:
    """Whether a red ``case`` failed through a contract assertion on ``target`` rather than by crashing.

    A ``<failure>`` whose exception (or, for a group, one of its sub-exceptions) is an ``AssertionError``, one of the
    rank pool's, or a ``pytest.fail`` worded by ``contract_failure``. Of the ``<error>`` elements only one kind
    counts: a teardown ``AssertionError`` worded by ``contract_failure``, which is how the import-side-effects family's
    session watch reports Megatron changed after a case; any other setup, teardown or collection error is a crash.
    """
    for kind, message in raised_by(case):
        if case.detail is not None and case.detail.tag == "error":
            if kind == "AssertionError" and _contract_head(message, target):
                return True
        elif kind in _ASSERTION_TYPES or (kind in _FAIL_TYPES and _contract_head(message, target)):
            return True
    return False


def sort_reds(run: CaseRun, target: str) -> tuple[list[str], dict[str, str]]:
    """The red cases of ``run``: node ids failed by a contract assertion, and the others with what they raised."""
    caught, crashed = [], {}
    for case in run.cases:
        if case.verdict != "failed":
            continue
        if is_contract_verdict(case, target):
            caught.append(case.nodeid)
        else:
            kinds = [f"{kind}: {message}" if kind else message for kind, message in raised_by(case)]
            crashed[case.nodeid] = "; ".join(line.split("\n", 1)[0][:200] for line in kinds) or "no message"
    return sorted(caught), dict(sorted(crashed.items()))


def _run_mutant(
    python: Path,
    target: str,
    selection: list[str],
    subject: str,
    site: Path | None,
    report_dir: Path,
    first_failure: bool = False,
) -> CaseRun:
    """Run ``selection`` in the target venv of ``python``, with the mutated copy (if any) first on the path."""
    profile, options = run_options(first_failure)
    options = [*options, f"--subject={subject}"]
    command = case_command(target, report_dir, selection, python=python, profile=profile, options=options)
    return run_cases(command, environment(site), _CASE_TIMEOUT_S, runner=run_warm)


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
    """Cases that went red through a contract assertion."""
    crashed: dict[str, str] = field(default_factory=dict)
    """Cases that went red any other way, with what they raised."""
    note: str = ""
    seconds: float = 0.0
    why: str = ""


def _outcome(mutant: Mutant, target: str, verdict: str, **details: Any) -> Outcome:
    return Outcome(mutant.id, mutant.kind, target, mutant.family, mutant.equivalent, verdict, why=mutant.why, **details)


def _crash_note(crashed: dict[str, str]) -> str:
    return "red only through crashes, no contract assertion failed: " + "; ".join(
        f"{nodeid} ({raised})" for nodeid, raised in crashed.items()
    )


def judge(mutant: Mutant, run: CaseRun, target: str) -> tuple[str, str]:
    """Verdict and note for ``mutant`` from its (last) run on ``target``.

    Only a contract assertion judges (:func:`is_contract_verdict`). Killed: a case of the mutant's own family failed
    one; if only other families did (the second run, every family but smoke) it is still killed, with a note, since
    the gate went red but the declared contract did not say why. An equivalent mutant is a false alarm as soon as a
    case fails one. Broken: cases went red, but only by crashing (the harness, an import, a fixture): that proves
    nothing either way, so it is neither a kill nor a false alarm, and the note names what they raised. A run that
    broke as a whole judges nothing: error.
    """
    if run.broken():
        return "error", f"pytest exit {run.returncode}: {run.output}"
    caught, crashed = sort_reds(run, target)
    if not caught:
        if crashed:
            return "broken", _crash_note(crashed)
        return ("ok" if mutant.equivalent else "survived"), ""
    also = f"also {_crash_note(crashed)}" if crashed else ""
    if mutant.equivalent:
        return "false alarm", also
    families = sorted({_family_name(case) for case in caught})
    if mutant.family in families:
        return "killed", also
    elsewhere = f"caught only by {', '.join(families)}, not by its own family"
    return "killed", f"{elsewhere}; {also}" if also else elsewhere


def _finding_naming(mutant: Mutant, report_dir: Path) -> str | None:
    """The finding of the run in ``report_dir`` that contains the mutant's ``finding`` text, if it declares one."""
    if mutant.finding is None:
        return None
    try:
        findings = read_summary(report_dir).findings
    except (OSError, SummaryError):
        return None
    return next((f["text"] for f in findings if mutant.finding in f["text"]), None)


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
    run = _run_mutant(python, target, mutant.selection(), chosen, site, workdir, first_failure=not mutant.equivalent)
    return _conclude(
        mutant,
        target,
        run,
        workdir,
        started,
        lambda others: _run_mutant(python, target, others, chosen, site, workdir, first_failure=True),
    )


def _conclude(
    mutant: Mutant,
    target: str,
    run: CaseRun,
    report_dir: Path,
    started: float,
    run_others: Callable[[list[str]], CaseRun],
) -> Outcome:
    """The outcome of a mutant's first run (in ``report_dir``): a finding that names it, else its verdict, after
    running every other family (``run_others``) where a mutant that must be caught stayed green."""
    found = _finding_naming(mutant, report_dir) if not run.broken() and not run.failed() else None
    if found is not None:
        seconds = round(time.monotonic() - started, 1)
        note = "named by a finding of its family, not by a red: it changes no value the subject computes"
        return _outcome(mutant, target, "killed", caught_by=[f"finding: {found}"], note=note, seconds=seconds)
    if not run.broken() and not mutant.equivalent and not run.failed():
        run = run_others([f.case_file for f in MUTABLE if f.name != mutant.family])
    verdict, note = judge(mutant, run, target)
    caught, crashed = sort_reds(run, target)
    seconds = round(time.monotonic() - started, 1)
    return _outcome(mutant, target, verdict, caught_by=caught, crashed=crashed, note=note, seconds=seconds)


def _in_place(mutant: Mutant) -> bool:
    """Whether a Megatron mutant runs in a warm run's forked session rather than on a copied package."""
    return mutant.kind == "megatron" and can_run_in_place([edit.file for edit in mutant.edits])


def _write_mutations(mutants: list[Mutant], package: Path, path: Path) -> Path:
    """The mutations file of a warm run (:func:`harness.targets.in_place_mutant.read_mutations`): per mutant, its id
    and the edited text of each file it changes in the ``megatron`` package at ``package``."""
    path.write_text(json.dumps([{"id": m.id, "sources": mutated_sources(m, package)} for m in mutants]))
    return path


def _evaluate_together(
    mutants: list[Mutant], target: str, python: Path, package: Path, subject: str, workdir: Path
) -> list[Outcome]:
    """Mutants of one target, kind and first selection in one warm run (:mod:`harness.plugin.warm_sessions`): torch
    and Megatron imported once for all of them; a subject mutant is the run's subject, a Megatron mutant is imported
    again in its own forked session. Each then goes on as :func:`_evaluate` would; its seconds are its share of the
    warm run, plus any run of its own."""
    started = time.monotonic()
    specs = [str(mutant.subject or subject) for mutant in mutants]
    megatron = mutants[0].kind == "megatron"
    mutations = _write_mutations(mutants, package, workdir / "mutations.json") if megatron else None
    profile, options = run_options(not mutants[0].equivalent)
    selection = mutants[0].selection()
    command = case_command(
        target, workdir, selection, python=python, profile=profile, options=options, subjects=specs, mutations=mutations
    )
    _, runs = subject_runs(command, environment(None), _CASE_TIMEOUT_S * len(specs), runner=run_warm)
    share = (time.monotonic() - started) / len(specs)
    outcomes = []
    for index, (mutant, spec, run) in enumerate(zip(mutants, specs, runs, strict=True), 1):
        folder = subject_folder(workdir, index, spec)

        def run_others(others: list[str], mutant: Mutant = mutant, spec: str = spec, folder: Path = folder) -> CaseRun:
            if not megatron:
                return _run_mutant(python, target, others, spec, None, folder / "others", first_failure=True)
            (folder / "others").mkdir()
            alone = _write_mutations([mutant], package, folder / "others" / "mutation.json")
            profile, options = run_options(True)
            command = case_command(
                target,
                folder / "others",
                others,
                python=python,
                profile=profile,
                options=options,
                subjects=[spec],
                mutations=alone,
            )
            return subject_runs(command, environment(None), _CASE_TIMEOUT_S, runner=run_warm)[1][0]

        try:
            outcomes.append(_conclude(mutant, target, run, folder, time.monotonic() - share, run_others))
        except (subprocess.TimeoutExpired, WarmServerError) as err:
            outcomes.append(_outcome(mutant, target, "error", note=str(err)))
    return outcomes


def _batches(jobs: list[tuple[Mutant, str]], workers: int) -> list[list[tuple[Mutant, str]]]:
    """The jobs as units of work: a Megatron mutant on a copied package alone (the copy is its own), other mutants
    of one target, kind, first selection and equivalence together, split among ``workers`` so that every worker has
    a share, and each share into warm runs of at most :data:`_WARM_RUN_MOST`."""
    units: list[list[tuple[Mutant, str]]] = []
    groups: dict[tuple[str, str, tuple[str, ...], bool], list[tuple[Mutant, str]]] = {}
    for mutant, target in jobs:
        if target not in mutant.targets or not (mutant.kind == "subject" or _in_place(mutant)):
            units.append([(mutant, target)])
        else:
            key = (target, mutant.kind, tuple(mutant.selection()), mutant.equivalent)
            groups.setdefault(key, []).append((mutant, target))
    for group in groups.values():
        parts = min(max(workers, 1), len(group))
        for share in (group[start::parts] for start in range(parts)):
            runs = -(-len(share) // _WARM_RUN_MOST)
            units += [share[start::runs] for start in range(runs)]
    return units


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
        """Killed over all applicable mutants that must be caught (a survivor, a broken run or an error counts
        against: none of them is a kill)."""
        judged = [o for o in self.outcomes if not o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "killed" for o in judged) / len(judged) if judged else None

    def false_alarm_rate(self) -> float | None:
        """False alarms over all applicable equivalent mutants (one whose runs only crashed is broken, not one)."""
        judged = [o for o in self.outcomes if o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "false alarm" for o in judged) / len(judged) if judged else None

    def failures(self) -> list[Outcome]:
        """What makes the run red: survivors, broken runs, false alarms and errors."""
        return [o for o in self.outcomes if o.verdict in ("survived", "broken", "false alarm", "error")]


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
    steps = Progress(len(jobs))
    must_catch: list[Outcome] = []
    tally = threading.Lock()

    def job(unit: list[tuple[Mutant, str]]) -> list[Outcome]:
        first, target = unit[0]
        with tempfile.TemporaryDirectory(prefix=f"mutant-{first.id}-") as workdir:
            try:
                python, package = pythons[target], packages[target]
                if target in first.targets and (first.kind == "subject" or _in_place(first)):
                    done = _evaluate_together([m for m, _ in unit], target, python, package, subject, Path(workdir))
                else:
                    done = [_evaluate(first, target, python, package, subject, Path(workdir))]
            except (MutationError, subprocess.TimeoutExpired, WarmServerError) as err:
                done = [_outcome(mutant, target, "error", note=str(err)) for mutant, _ in unit]
        for outcome in done:
            tell(outcome)
        return done

    def tell(outcome: Outcome) -> None:
        with tally:
            if not outcome.equivalent and outcome.verdict != "not applicable":
                must_catch.append(outcome)
            killed = sum(o.verdict == "killed" for o in must_catch)
            judged = len(must_catch)
            status = steps.advance()
        if outcome.verdict != "not applicable":
            cases = f" ({len(outcome.caught_by)} failing cases)" if outcome.caught_by else ""
            progress(
                f"{status} {outcome.verdict}: {outcome.mutant} on {outcome.target}{cases} {outcome.seconds} s; "
                f"killed {killed} of {judged} must-catch runs so far"
            )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(job, unit) for unit in _batches(jobs, workers)]
        outcomes = [outcome for future in futures for outcome in future.result()]
    order = {m.id: i for i, m in enumerate(mutants)}
    outcomes.sort(key=lambda o: (order[o.mutant], o.target))
    return Report(list(pythons), subject, outcomes, round(time.monotonic() - started, 1))
