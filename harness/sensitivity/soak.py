"""The soak: the gate run again and again under fresh random seeds on subjects that are right, counting false reds.

A user's laptop runs the ``dev`` profile, which is not derandomized: each run draws new examples, and one draw in a
thousand that turns a right subject red (or breaks the gate's own generator) is a gate a user stops trusting. CI
replays the same derandomized examples every time and never meets such a draw; the soak does. Each run draws a
seed, runs the reference subject on every case and each correct variant of the mutant catalogue
(``harness/sensitivity/correct/``) on the case file of the family it varies, on the targets the catalogue names,
under the ``soak`` profile (``dev`` without an example database, so that a red in one run is not replayed first in
the next), and records every subject's status. Any status but 0 is a false red (or the gate's own error, or a broken
run), listed with its seed and the command that replays it.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import REPO_ROOT
from harness.formats.environment import REFERENCE_SUBJECT
from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.plugin.command import case_command, subject_runs
from harness.plugin.families import FAMILIES
from harness.sensitivity.catalogue import CATALOGUE, load_catalogue

CORRECT = REPO_ROOT / "harness" / "sensitivity" / "correct"
PROFILE = "soak"
_RUN_TIMEOUT_S = 1800


def correct_variants(known_targets: Iterable[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each correct variant of the mutant catalogue (a subject under ``correct/`` that must stay green), with the case
    file of the family it varies (named by its file's prefix) and the targets the catalogue runs it on: a variant
    that replaces a symbol some release lacks is a right subject only where the symbol exists."""
    found = {}
    for mutant in load_catalogue(CATALOGUE, known_targets):
        if mutant.kind != "subject" or not mutant.equivalent or mutant.subject is None:
            continue
        path = Path(mutant.subject)
        owner = next((f for f in FAMILIES if path.stem.startswith(f.name.replace("-", "_") + "_")), None)
        if path.parent == CORRECT and owner is not None:
            found[str(path)] = (owner.case_file, mutant.targets)
    return found


@dataclass
class Outcome:
    """One subject's session in one soak run: its exit status and, where it was not green, the cases that were red
    and the line that replays the run."""

    target: str
    seed: int
    subject: str
    selection: str
    status: int
    red: list[str] = field(default_factory=list)
    replay: str = ""

    @property
    def verdict(self) -> str:
        if self.status == 0:
            return "green"
        if self.status == GATE_ERROR_STATUS:
            return "gate error"
        return "false red" if self.status == 1 else f"broken (exit {self.status})"


@dataclass
class SoakResult:
    """Every outcome of a soak, and its duration."""

    runs: int
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def not_green(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != 0]

    def summary(self) -> str:
        targets = sorted({o.target for o in self.outcomes})
        verdicts = [o.verdict for o in self.outcomes]
        broken = sum(1 for verdict in verdicts if verdict.startswith("broken"))
        return (
            f"soak: {self.runs} run(s) on each of {', '.join(targets)}, "
            f"{len(self.outcomes)} subject sessions under fresh seeds: {verdicts.count('false red')} false red(s), "
            f"{verdicts.count('gate error')} gate error(s), {broken} broken, in {self.seconds:.0f} s"
        )


def _plan(target: str, variants: dict[str, tuple[str, tuple[str, ...]]]) -> list[tuple[tuple[str, ...], list[str]]]:
    """What one run on ``target`` runs: the reference on every case, then the variants of each case file that apply
    to ``target``, together."""
    plan: list[tuple[tuple[str, ...], list[str]]] = [(("cases",), [REFERENCE_SUBJECT])]
    by_file: dict[str, list[str]] = {}
    for variant, (case_file, targets) in variants.items():
        if target in targets:
            by_file.setdefault(case_file, []).append(variant)
    plan += [((case_file,), names) for case_file, names in by_file.items()]
    return plan


def subject_name(subject: str) -> str:
    """A subject as a line names it: a variant by its file's stem, the reference by its module."""
    return Path(subject).stem if subject.endswith(".py") else subject


def _replay(target: str, subject: str, selection: tuple[str, ...], seed: int) -> str:
    subject_part = "" if subject == REFERENCE_SUBJECT else f"MEGATRON_CONFORMANCE_SUBJECT={subject} "
    return (
        f"{subject_part}nox -R -s {target} -- {' '.join(selection)} "
        f"--hypothesis-profile={PROFILE} --hypothesis-seed={seed}"
    )


def soak(
    pythons: dict[str, Path],
    known_targets: Iterable[str],
    runs: int,
    log: Callable[[str], None],
    seeds: list[int] | None = None,
) -> SoakResult:
    """``runs`` soak runs on each target of ``pythons`` (session to venv interpreter; ``known_targets``: every
    target of the matrix, which the catalogue names), each under a fresh seed (or the given ``seeds``, for a
    replay), saying each run's outcome as it ends."""
    result = SoakResult(runs)
    started = time.monotonic()
    variants = correct_variants(known_targets)
    draw = random.SystemRandom()
    for target, python in pythons.items():
        plan = _plan(target, variants)
        for index in range(runs):
            seed = seeds[index] if seeds else draw.randrange(2**32)
            run_started = time.monotonic()
            outcomes = []
            for selection, subjects in plan:
                with tempfile.TemporaryDirectory(prefix="soak-") as report_dir:
                    command = case_command(
                        target,
                        Path(report_dir),
                        selection,
                        python=python,
                        profile=PROFILE,
                        options=[f"--hypothesis-seed={seed}"],
                        subjects=subjects,
                    )
                    _, subject_results = subject_runs(command, timeout=_RUN_TIMEOUT_S)
                for subject, run in zip(subjects, subject_results, strict=True):
                    outcome = Outcome(target, seed, subject, " ".join(selection), run.returncode)
                    if run.returncode != 0:
                        outcome.red = sorted(run.failed())
                        outcome.replay = _replay(target, subject, selection, seed)
                    outcomes.append(outcome)
            result.outcomes += outcomes
            bad = [o for o in outcomes if o.status != 0]
            words = "all green" if not bad else "; ".join(f"{o.verdict}: {subject_name(o.subject)}" for o in bad)
            log(
                f"[{index + 1}/{runs}] {target} seed {seed}: {len(outcomes)} subject sessions, {words} "
                f"({time.monotonic() - run_started:.0f} s)"
            )
    result.seconds = time.monotonic() - started
    return result


def write_report(result: SoakResult, folder: Path) -> Path:
    """``soak.json`` under ``folder``: the summary line and every outcome."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "soak.json"
    data = {"summary": result.summary(), "seconds": round(result.seconds, 1), "runs": result.runs}
    data["outcomes"] = [asdict(o) for o in result.outcomes]
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
