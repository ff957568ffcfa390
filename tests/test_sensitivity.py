"""The gate's sensitivity: a catalogue of mutants (harness/sensitivity/mutants.yaml) that each family must
catch, and equivalent ones it must let through.

The whole catalogue runs in ``nox -s sensitivity``; here a fast subset, one mutant per family on megatron-0.15 and on
the newest target, keeps proving in CI that every family still bites, next to the catalogue's own validation and the
tooling's refusals: an edit matching another number of times than declared, and a mutated copy that is not the
Megatron imported.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.sensitivity import mutation
from harness.targets.matrix import load_matrix
from tests.pytest_helpers import ROOT, target_python

SESSION = "megatron-0.15"
KNOWN = tuple(t.session for t in load_matrix(ROOT / "matrix.yaml").targets)
NEWEST = KNOWN[-1]
# One mutant per family: the gate must go red on each, through a case of that family.
FAST_SUBSET = (
    "chunks_reversed",
    "sum_avg_swapped",
    "gpt_process_group_keyword_renamed",
    "finalize_binds_at_import",
    "tp_group_renamed",
)
EDIT = {"file": "core/x.py", "find": "a = 1", "replace": "a = 2"}
VALID: dict[str, Any] = {
    "mutants": [
        {"id": "m", "kind": "megatron", "family": "equivalence", "targets": [SESSION], "why": "w", "edits": [EDIT]},
        {"id": "s", "kind": "subject", "family": "chunks", "targets": [SESSION], "why": "w", "subject": "tests"},
    ]
}


def catalogue() -> list[mutation.Mutant]:
    return mutation.load_catalogue(mutation.CATALOGUE, KNOWN)


def test_catalogue_covers_every_family() -> None:
    mutants = catalogue()
    must_catch = [m for m in mutants if m.kind == "megatron" and not m.equivalent]
    assert len(must_catch) >= 15, f"{len(must_catch)} Megatron mutants the gate must catch"
    assert sum(m.equivalent for m in mutants) >= 3
    subjects = [m for m in mutants if m.kind == "subject"]
    assert len(subjects) >= 15
    assert {m.family for m in subjects} == set(mutation.FAMILIES)
    assert {m.family for m in must_catch} == set(mutation.FAMILIES) - {"chunks"}
    assert set(FAST_SUBSET) <= {m.id for m in mutants}


@pytest.mark.parametrize("session", ["megatron-0.13", "megatron-0.15", "megatron-0.16", NEWEST])
def test_every_edit_matches_its_target_and_compiles(session: str) -> None:
    package = mutation.installed_package(target_python(session))
    for mutant in catalogue():
        if mutant.kind == "megatron" and session in mutant.targets:
            for file, text in mutation.mutated_sources(mutant, package).items():
                compile(text, f"{mutant.id}:{file}", "exec")


def broken(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(VALID)
    change(document["mutants"])
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda ms: ms[0].update(severity="high"), "mutant 'm': key 'severity': unknown key"),
        (lambda ms: ms[0].pop("why"), "mutant 'm': key 'why': missing required key"),
        (lambda ms: ms[0].pop("family"), "mutant 'm': 'family' must be one of"),
        (lambda ms: ms[0].update(equivalent=True), "mutant 'm': an equivalent mutant must stay green"),
        (lambda ms: ms[0].update(targets=["megatron-9.9"]), "mutant 'm': target 'megatron-9.9' is not in the matrix"),
        (lambda ms: ms[0].update(kind="torch"), "mutant 'm': kind 'torch' is not one of"),
        (lambda ms: ms[0].update(edits=[]), "mutant 'm': a megatron mutant needs a non-empty list of 'edits'"),
        (lambda ms: ms[0]["edits"][0].pop("find"), "mutant 'm': edit key 'find': missing required key"),
        (lambda ms: ms[0]["edits"][0].update(line=3), "mutant 'm': edit key 'line': unknown key"),
        (lambda ms: ms[0]["edits"][0].update(count=0), "mutant 'm': edit 'count' must be a positive integer"),
        (lambda ms: ms[0]["edits"][0].update(file="/etc/x.py"), "must be relative to the megatron package root"),
        (lambda ms: ms[1].update(subject="tests/seeded/nothing.py"), "mutant 's': subject tests/seeded/nothing.py"),
        (lambda ms: ms[1].update(edits=[EDIT]), "mutant 's': a subject mutant takes 'subject', not 'edits'"),
        (lambda ms: ms.append(dict(ms[1])), "mutant 's': duplicate id"),
        (lambda ms: ms.append("m2"), "entry 2 must be a mapping"),
    ],
)
def test_catalogue_errors_name_the_mutant_and_the_key(change: Any, message: str) -> None:
    mutation.parse_catalogue(VALID, KNOWN)
    with pytest.raises(mutation.CatalogueError, match=re.escape(message)):
        mutation.parse_catalogue(broken(change), KNOWN)


def test_unknown_mutant_ids_are_refused() -> None:
    with pytest.raises(mutation.CatalogueError, match="no mutant named 'nope'"):
        mutation.select(catalogue(), ["sum_avg_swapped", "nope"])


def fake_package(tmp_path: Path) -> Path:
    package = tmp_path / "megatron"
    (package / "core").mkdir(parents=True)
    (package / "core" / "x.py").write_text("a = 1\nb = 1\nb = 1\n")
    return package


def one_edit(find: str, count: int = 1) -> mutation.Mutant:
    edit = mutation.Edit("core/x.py", find, "c = 3", count)
    return mutation.Mutant("probe", "megatron", (SESSION,), "w", "equivalence", edits=(edit,))


@pytest.mark.parametrize(("find", "found"), [("z = 0", 0), ("b = 1", 2)])
def test_find_text_matching_other_than_once_fails_loudly(tmp_path: Path, find: str, found: int) -> None:
    package = fake_package(tmp_path)
    with pytest.raises(mutation.MutationError) as raised:
        mutation.build_mutant_package(one_edit(find), package, tmp_path / "work")
    assert f"mutant probe: the find text occurs {found} times in core/x.py" in str(raised.value)
    assert "expected exactly 1" in str(raised.value)
    assert not (tmp_path / "work").exists(), "a failed mutant must not leave a copy behind"


def test_declared_count_applies_every_occurrence(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    site = mutation.build_mutant_package(one_edit("b = 1", count=2), package, tmp_path / "work")
    assert (site / "megatron" / "core" / "x.py").read_text() == "a = 1\nc = 3\nc = 3\n"
    assert (package / "core" / "x.py").read_text() == "a = 1\nb = 1\nb = 1\n", "the installed package was edited"


def test_a_copy_that_is_not_imported_is_refused(tmp_path: Path) -> None:
    """Without the copy on the path the installed Megatron loads: the pre-flight must say so, not let it survive."""
    with pytest.raises(mutation.MutationError, match="not from the copy"):
        mutation.verify_loaded(one_edit("a = 1"), target_python(SESSION), tmp_path)


def run(failed: dict[str, str], returncode: int = 1) -> mutation.CaseRun:
    return mutation.CaseRun(returncode, failed, "output")


@pytest.mark.parametrize(
    ("equivalent", "case_run", "verdict", "note"),
    [
        (False, run({"cases/test_equivalence.py::t": "equivalence"}), "killed", ""),
        (False, run({"cases/test_import.py::t": "import"}), "killed", "caught only by import, not by its own family"),
        (False, run({}, 0), "survived", ""),
        (True, run({"cases/test_chunks.py::t": "chunks"}), "false alarm", ""),
        (True, run({}, 0), "ok", ""),
        (False, run({}, 4), "error", "pytest exit 4: output"),
    ],
)
def test_verdicts(equivalent: bool, case_run: mutation.CaseRun, verdict: str, note: str) -> None:
    family = None if equivalent else "equivalence"
    mutant = mutation.Mutant("m", "megatron", (SESSION,), "w", family, equivalent, (mutation.Edit("f", "a", "b"),))
    assert mutation.judge(mutant, case_run) == (verdict, note)


def test_failing_cases_are_read_from_junit_with_their_family(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="cases.test_chunks" name="test_partition"><failure message="m"/></testcase>'
        '<testcase classname="cases.test_chunks" name="test_alignment"/>'
        '<testcase classname="" name="cases.test_equivalence"><error message="collection"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert mutation.failing_cases(junit) == {
        "cases/test_chunks.py::test_partition": "chunks",
        "cases/test_equivalence.py": "equivalence",
    }


def applicable(ids: tuple[str, ...], session: str) -> list[mutation.Mutant]:
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
    report = mutation.run_sensitivity(mutants, {session: target_python(session)}, "harness.reference", 2, print)
    verdicts = {o.mutant: (o.verdict, o.note, o.caught_by) for o in report.outcomes}
    assert all(verdict == "killed" and not note for verdict, note, _ in verdicts.values()), verdicts
    for outcome in report.outcomes:
        family = mutation.FAMILIES[str(outcome.family)]
        assert all(case.startswith(family) for case in outcome.caught_by), outcome
    markdown, data = mutation.write_report(report, tmp_path)
    assert "kill rate 100%" in markdown.read_text()
    assert json.loads(data.read_text())["kill_rate"] == 1.0
