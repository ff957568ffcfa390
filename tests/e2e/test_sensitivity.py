"""The gate's sensitivity on real target venvs: every catalogue edit applies to the Megatron it names, a copy that
is not the Megatron imported is refused, and a fast subset (one mutant per family) is killed by its own family on
megatron-0.15 and on the newest target. The whole catalogue runs in ``nox -s sensitivity``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.plugin.families import family
from harness.sensitivity.catalogue import CATALOGUE, Edit, Mutant, load_catalogue
from harness.sensitivity.mutate import MutationError, installed_package, mutated_sources, verify_loaded
from harness.sensitivity.report import write_report
from harness.sensitivity.runner import run_sensitivity
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT, on_one_target, target_python

SESSION = "megatron-0.15"
KNOWN = tuple(t.session for t in load_matrix(ROOT / "matrix.yaml").targets)
NEWEST = KNOWN[-1]
# One mutant per family: the gate must go red on each, through a case of that family.
FAST_SUBSET = (
    "chunk_splitting_last_dropped",
    "sum_avg_swapped",
    "gpt_process_group_keyword_renamed",
    "finalize_binds_at_import",
    "tp_group_renamed",
)


def catalogue() -> list[Mutant]:
    return load_catalogue(CATALOGUE, KNOWN)


@pytest.mark.parametrize("session", ["megatron-0.13", "megatron-0.15", "megatron-0.16", NEWEST])
def test_every_edit_matches_its_target_and_compiles(session: str) -> None:
    package = installed_package(target_python(session))
    for mutant in catalogue():
        if mutant.kind == "megatron" and session in mutant.targets:
            for file, text in mutated_sources(mutant, package).items():
                compile(text, f"{mutant.id}:{file}", "exec")


def test_a_copy_that_is_not_imported_is_refused(tmp_path: Path) -> None:
    """Without the copy on the path the installed Megatron loads: the pre-flight must say so, not let it survive."""
    probe = Mutant("probe", "megatron", (SESSION,), "w", "equivalence", edits=(Edit("core/x.py", "a = 1", "c = 3"),))
    with pytest.raises(MutationError, match="not from the copy"):
        verify_loaded(probe, target_python(SESSION), tmp_path)


def applicable(ids: tuple[str, ...], session: str) -> list[Mutant]:
    """The mutants ``ids`` as they apply to ``session``: the entry itself, or its version variant (``<id>_019``)."""
    mutants = catalogue()
    chosen = []
    for wanted in ids:
        variant = re.compile(rf"{re.escape(wanted)}(_0\d\d)?")
        found = [m for m in mutants if variant.fullmatch(m.id) and session in m.targets]
        assert len(found) == 1, f"{wanted}: {len(found)} catalogue entries apply to {session}"
        chosen.append(found[0])
    return chosen


@pytest.mark.parametrize("session", [SESSION, NEWEST])
def test_fast_subset_is_killed_by_its_own_family(session: str, tmp_path: Path) -> None:
    mutants = applicable(FAST_SUBSET, session)
    report = run_sensitivity(mutants, {session: target_python(session)}, "harness.reference", 2, print)
    verdicts = {o.mutant: (o.verdict, o.note, o.caught_by) for o in report.outcomes}
    assert all(verdict == "killed" and not note for verdict, note, _ in verdicts.values()), verdicts
    for outcome in report.outcomes:
        case_file = family(str(outcome.family)).case_file
        assert all(case.startswith(case_file) for case in outcome.caught_by), outcome
    markdown, data = write_report(report, tmp_path)
    assert "kill rate 100%" in markdown.read_text()
    assert json.loads(data.read_text())["kill_rate"] == 1.0


# Upstream adding a selection rule: a subject that copied the rules misses it. The generated populations carry the new
# name; the new attribute only reaches a param the real GPTModel builds (its qk-layernorms).
EQUIVALENCE = family("equivalence").case_file
RULE_ADDITIONS = {
    "upstream_adds_sum_name_pattern": f"{EQUIVALENCE}::test_matches_upstream_on_generated_modules[",
    "upstream_adds_avg_attribute": f"{EQUIVALENCE}::test_finalize_model_grads_on_a_real_gpt_model[qk-layernorm-gloo]",
}


@pytest.mark.parametrize("session", on_one_target([SESSION, NEWEST], [NEWEST]))
def test_an_upstream_rule_the_subject_did_not_copy_is_killed_by_equivalence(session: str) -> None:
    mutants = applicable(tuple(RULE_ADDITIONS), session)
    report = run_sensitivity(mutants, {session: target_python(session)}, "harness.reference", 2, print)
    for outcome in report.outcomes:
        assert outcome.verdict == "killed" and not outcome.note, outcome
        expected = RULE_ADDITIONS[re.sub(r"_0\d\d$", "", outcome.mutant)]
        assert [case for case in outcome.caught_by if case.startswith(expected)] == outcome.caught_by, outcome


CRASHING_SUBJECT = """from harness.reference import *  # noqa: F403


def split_into_chunks(params, grads, budget_bytes):
    raise TypeError("the splitter crashed")
"""


def test_a_new_unchunked_reduction_is_caught_by_the_real_steps_finding() -> None:
    """Upstream adds a second coalesced reduction after the patched call: no value differs, so no case is red; the
    real step's measurement names it as a reduction the subject does not bound, and that counts as caught."""
    mutants = applicable(("upstream_second_coalesced_reduction",), SESSION)
    report = run_sensitivity(mutants, {SESSION: target_python(SESSION)}, "harness.reference", 1, print)
    [outcome] = report.outcomes
    assert outcome.verdict == "killed" and outcome.caught_by, outcome
    assert "_resync_sequence_parallel_grads (" in outcome.caught_by[0] and "bytes in one buffer" in outcome.caught_by[0]


def test_subject_mutants_of_one_warm_run_are_judged_each_on_its_own(tmp_path: Path) -> None:
    """A crashing splitter, a seeded break and a correct splitter posing as a mutant, in one warm run (one worker):
    a real red run whose cases crash (no contract assertion fails) is broken, the break is killed by its family, and
    the correct one, green on its family, goes on to every other family on its own and survives."""
    subject = tmp_path / "crashing_subject.py"
    subject.write_text(CRASHING_SUBJECT)
    crashing = Mutant("crashes", "subject", (SESSION,), "w", "chunk-splitting", subject=str(subject))
    [dropped] = applicable(("chunk_splitting_last_dropped",), SESSION)
    correct = Mutant("correct", "subject", (SESSION,), "w", "chunk-splitting", subject=str(ROOT / "harness/reference"))
    mutants = [crashing, dropped, correct]
    report = run_sensitivity(mutants, {SESSION: target_python(SESSION)}, "harness.reference", 1, print)
    outcome, killed, survived = report.outcomes
    assert outcome.verdict == "broken" and outcome.caught_by == [], outcome
    assert list(outcome.crashed.values()) == ["TypeError: the splitter crashed"], outcome
    assert killed.verdict == "killed" and killed.caught_by, killed
    assert all(case.startswith(family("chunk-splitting").case_file) for case in killed.caught_by), killed
    assert survived.verdict == "survived" and not survived.crashed, survived
    assert report.kill_rate() == 1 / 3 and report.failures() == [outcome, survived]
    markdown, _ = write_report(report, tmp_path / "report")
    assert "1 broken (red only through crashes, not kills)" in markdown.read_text()
