"""The mutant catalogue's validation, the making of a mutated copy, and the verdicts: no target venv needed.

The catalogue ships with its seeded subjects (``harness/sensitivity/seeded/``), so a copy of the gate without
``tests/`` can run ``nox -s sensitivity``; ``test_catalogue_works_from_a_copy_without_tests`` proves it.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.junit import JUnitCase, parse_case
from harness.plugin.command import CaseRun
from harness.plugin.families import MUTABLE
from harness.sensitivity import catalogue as cat
from harness.sensitivity.mutate import MutationError, build_mutant_package
from harness.sensitivity.report import summary_line, write_report
from harness.sensitivity.runner import Outcome, Report, _batches, is_contract_verdict, judge, raised_by, sort_reds
from harness.targets.matrix import load_matrix

SESSION = "megatron-0.15"
KNOWN = tuple(t.session for t in load_matrix(REPO_ROOT / "matrix.yaml").targets)
EDIT = {"file": "core/x.py", "find": "a = 1", "replace": "a = 2"}
VALID: dict[str, Any] = {
    "mutants": [
        {"id": "m", "kind": "megatron", "family": "equivalence", "targets": [SESSION], "why": "w", "edits": [EDIT]},
        {
            "id": "s",
            "kind": "subject",
            "family": "chunk-splitting",
            "targets": [SESSION],
            "why": "w",
            "subject": "seeded/chunk_splitting_last_dropped.py",
        },
    ]
}


def catalogue() -> list[cat.Mutant]:
    return cat.load_catalogue(cat.CATALOGUE, KNOWN)


def test_catalogue_covers_every_family() -> None:
    mutants = catalogue()
    families = {f.name for f in MUTABLE}
    must_catch = [m for m in mutants if m.kind == "megatron" and not m.equivalent]
    assert len(must_catch) >= 15, f"{len(must_catch)} Megatron mutants the gate must catch"
    assert sum(m.equivalent for m in mutants) >= 3
    subjects = [m for m in mutants if m.kind == "subject" and not m.equivalent]
    assert len(subjects) >= 15
    assert {m.family for m in subjects} == families
    assert {m.family for m in must_catch} == families - {"chunk-splitting"}


def test_subject_mutants_live_beside_the_catalogue() -> None:
    """Seeded breaks under ``seeded/``, correct variants (must stay green) under ``correct/``."""
    beside = cat.CATALOGUE.parent
    for mutant in catalogue():
        if mutant.kind == "subject":
            home = beside / ("correct" if mutant.equivalent else "seeded")
            assert Path(str(mutant.subject)).is_relative_to(home), mutant


def test_every_correct_variant_is_a_must_stay_green_subject() -> None:
    variants = {path.resolve() for path in (cat.CATALOGUE.parent / "correct").glob("*.py") if path.stem != "variant"}
    variants -= {(cat.CATALOGUE.parent / "correct" / "__init__.py").resolve()}
    listed = {Path(str(m.subject)) for m in catalogue() if m.kind == "subject" and m.equivalent}
    assert variants and variants == listed


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
        (lambda ms: ms[0].update(family="chunks"), "'family' must be one of chunk-splitting, equivalence"),
        (lambda ms: ms[0].update(equivalent=True), "mutant 'm': an equivalent mutant must stay green"),
        (lambda ms: ms[0].update(targets=["megatron-9.9"]), "mutant 'm': target 'megatron-9.9' is not in the matrix"),
        (lambda ms: ms[0].update(kind="torch"), "mutant 'm': kind 'torch' is not one of"),
        (lambda ms: ms[0].update(edits=[]), "mutant 'm': a megatron mutant needs a non-empty list of 'edits'"),
        (lambda ms: ms[0]["edits"][0].pop("find"), "mutant 'm': edit key 'find': missing required key"),
        (lambda ms: ms[0]["edits"][0].update(line=3), "mutant 'm': edit key 'line': unknown key"),
        (lambda ms: ms[0]["edits"][0].update(count=0), "mutant 'm': edit 'count' must be a positive integer"),
        (lambda ms: ms[0]["edits"][0].update(file="/etc/x.py"), "must be relative to the megatron package root"),
        (lambda ms: ms[1].update(subject="seeded/nothing.py"), "mutant 's': subject seeded/nothing.py does not exist"),
        (lambda ms: ms[1].update(edits=[EDIT]), "mutant 's': a subject mutant takes 'subject', not 'edits'"),
        (lambda ms: ms.append(dict(ms[1])), "mutant 's': duplicate id"),
        (lambda ms: ms.append("m2"), "entry 2 must be a mapping"),
        (lambda ms: ms[0].update(finding=""), "mutant 'm': 'finding' must be a non-empty string"),
        (
            lambda ms: ms[0].update(finding="x", equivalent=True, family=None),
            "mutant 'm': a mutant caught by a finding is not equivalent",
        ),
    ],
)
def test_catalogue_errors_name_the_mutant_and_the_key(change: Any, message: str) -> None:
    cat.parse_catalogue(VALID, KNOWN)
    with pytest.raises(cat.CatalogueError, match=re.escape(message)):
        cat.parse_catalogue(broken(change), KNOWN)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"mutants": [], "extra": 1}, "key 'extra': unknown key (allowed: mutants)"),
        ({}, "key 'mutants': missing required key"),
        ({"mutants": {}}, "key 'mutants' must hold a list"),
    ],
)
def test_top_level_errors_name_the_key(document: dict[str, Any], message: str) -> None:
    with pytest.raises(cat.CatalogueError, match=re.escape(message)):
        cat.parse_catalogue(document, KNOWN)


def test_unknown_mutant_ids_are_refused() -> None:
    with pytest.raises(cat.CatalogueError, match="no mutant named 'nope'"):
        cat.select(catalogue(), ["sum_avg_swapped", "nope"])


def test_catalogue_works_from_a_copy_without_tests(tmp_path: Path) -> None:
    """What the workflow file tells users to copy (noxfile, matrix, harness, cases) is enough for the catalogue."""
    for name in ("noxfile.py", "matrix.yaml"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    for name in ("harness", "cases"):
        shutil.copytree(REPO_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "from harness.sensitivity.catalogue import CATALOGUE, load_catalogue; "
        "from harness.targets.matrix import load_matrix; "
        "known = [t.session for t in load_matrix('matrix.yaml').targets]; "
        "print(len(load_catalogue(CATALOGUE, known)))"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert int(completed.stdout) == len(catalogue())


def fake_package(tmp_path: Path) -> Path:
    package = tmp_path / "megatron"
    (package / "core").mkdir(parents=True)
    (package / "core" / "x.py").write_text("a = 1\nb = 1\nb = 1\n")
    return package


def one_edit(find: str, count: int = 1) -> cat.Mutant:
    edit = cat.Edit("core/x.py", find, "c = 3", count)
    return cat.Mutant("probe", "megatron", (SESSION,), "w", "equivalence", edits=(edit,))


@pytest.mark.parametrize(("find", "found"), [("z = 0", 0), ("b = 1", 2)])
def test_find_text_matching_other_than_once_fails_loudly(tmp_path: Path, find: str, found: int) -> None:
    package = fake_package(tmp_path)
    with pytest.raises(MutationError) as raised:
        build_mutant_package(one_edit(find), package, tmp_path / "work")
    assert f"mutant probe: the find text occurs {found} times in core/x.py" in str(raised.value)
    assert "expected exactly 1" in str(raised.value)
    assert not (tmp_path / "work").exists(), "a failed mutant must not leave a copy behind"


def test_declared_count_applies_every_occurrence(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    site = build_mutant_package(one_edit("b = 1", count=2), package, tmp_path / "work")
    assert (site / "megatron" / "core" / "x.py").read_text() == "a = 1\nc = 3\nc = 3\n"
    assert (package / "core" / "x.py").read_text() == "a = 1\nb = 1\nb = 1\n", "the installed package was edited"


# --- verdicts: only a contract assertion kills ------------------------------------------------------------------
#
# Each red below is worded as pytest 9's JUnit writes it (checked against real runs): no ``type`` attribute, the
# exception's type heading ``message`` (module-qualified unless a builtin), groups spelled out only in the text.

HEAD = f"[{SESSION}] equivalence: allreduce_non_tensor_model_parallel_grads against upstream (world 2, TP 2, gloo)"
GROUP_TEXT = """+ Exception Group Traceback (most recent call last):
  |   File "cases/test_equivalence.py", line 29, in check
  | ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "cases/test_equivalence.py", line 34, in check
    |     raise TypeError("crash")
    | {first}
    | Failing test case: check(
    |     case=...,
    | )
    +---------------- 2 ----------------
    | Traceback (most recent call last):
    |   File "cases/test_equivalence.py", line 32, in check
    | {second}
    | assert False
    | Explanation:
    |     These lines were always and only run by failing test cases:
    +------------------------------------"""
GROUP = "ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions)"
RED = {
    # name: (tag, message, text, a contract verdict?)
    "assertion": ("failure", f"AssertionError: {HEAD}:\n  rank 0: param x differs", "", True),
    "hypothesis assertion": ("failure", f"AssertionError: {HEAD}\nassert False\nFailing test case: check(", "", True),
    "rewritten bare assert": ("failure", "assert 1 == 2", "", True),
    "rank raised": ("failure", "harness.ranks.pool.RankRaised: compare_task failed on ranks [0, 1]", "", False),
    "rank timeout": ("failure", "harness.ranks.pool.RankTimeout: ranks [1] did not answer within 120 s", "", True),
    "rank died": ("failure", "harness.ranks.pool.RankDied: rank 1 died (SIGKILL)", "", False),
    "contract pytest.fail": ("failure", f"Failed: [{SESSION}] chunk-splitting: property 'budget validation'", "", True),
    "other pytest.fail": ("failure", "Failed: torch.distributed is already initialised in this process", "", False),
    "other target's pytest.fail": ("failure", "Failed: [megatron-0.13] chunk-splitting: property 'budget'", "", False),
    "pytest.fail of no family": ("failure", f"Failed: [{SESSION}] chunks: property 'budget'", "", False),
    "harness crash": ("failure", "TypeError: split() takes 3 positional arguments but 4 were given", "", False),
    "import error": ("failure", "ModuleNotFoundError: No module named 'megatron.core.foo'", "", False),
    "foreign AssertionError subclass": ("failure", "mylib.CheckFailed: x", "", False),
    "xpass strict": ("failure", "[XPASS(strict)] known failure", "", False),
    "group with an assertion": (
        "failure",
        GROUP,
        GROUP_TEXT.format(first="TypeError: crash", second=f"AssertionError: {HEAD}"),
        True,
    ),
    "group of crashes": (
        "failure",
        GROUP,
        GROUP_TEXT.format(first="TypeError: crash", second="KeyError: 'x'"),
        False,
    ),
    "single-exception group": (
        "failure",
        f"AssertionError('{HEAD}') [single exception in FlakyFailure]",
        GROUP_TEXT.format(first=f"AssertionError: {HEAD}", second="TypeError: x"),
        True,
    ),
    "declared type": ("failure", "harness.ranks.pool.RankTimeout: stuck", "", True),
    "collection error": ("error", "collection failure", "E   ModuleNotFoundError: No module named 'x'", False),
    "fixture error": ("error", 'failed on setup with "RuntimeError: fixture broke"', "", False),
    "setup AssertionError": ("error", f'failed on setup with "AssertionError: {HEAD}"', "", False),
    "teardown crash": ("error", 'failed on teardown with "RuntimeError: teardown broke"', "", False),
    "session watch": (
        "error",
        f'failed on teardown with "AssertionError: [{SESSION}] import-side-effects: Megatron\'s functions differ"',
        "",
        True,
    ),
}


def red_case(nodeid: str, kind: str = "assertion") -> JUnitCase:
    """A red ``<testcase>`` at ``nodeid`` (``cases/test_x.py::name``, or a module for a collection error)."""
    tag, message, text, _ = RED[kind]
    module, _, name = nodeid.partition("::")
    dotted = module.removesuffix(".py").replace("/", ".")
    classname, name = (dotted, name) if name else ("", dotted)
    element = ET.Element("testcase", classname=classname, name=name)
    red = ET.SubElement(element, tag, message=message)
    red.text = text
    if kind == "declared type":
        red.set("type", "harness.ranks.pool.RankTimeout")
        red.set("message", "stuck")
    return parse_case(element)


def run(failed: list[str], returncode: int = 1, kind: str = "assertion") -> CaseRun:
    """A case run whose JUnit holds a red case of ``kind`` for each of ``failed``, and one green case."""
    green = parse_case(ET.fromstring('<testcase classname="cases.test_smoke" name="test_ok"/>'))
    return CaseRun(returncode, "output", [green, *(red_case(nodeid, kind) for nodeid in failed)])


def mutant(equivalent: bool = False) -> cat.Mutant:
    family = None if equivalent else "equivalence"
    return cat.Mutant("m", "megatron", (SESSION,), "w", family, equivalent, (cat.Edit("f", "a", "b"),))


@pytest.mark.parametrize("kind", sorted(RED))
def test_only_a_contract_assertion_is_a_verdict(kind: str) -> None:
    case = red_case("cases/test_equivalence.py::t", kind)
    assert is_contract_verdict(case, SESSION) == RED[kind][3], raised_by(case)


@pytest.mark.parametrize("kind", sorted(RED))
def test_a_mutant_is_killed_only_by_an_assertion_and_broken_by_a_crash(kind: str) -> None:
    red = run(["cases/test_equivalence.py::t"], kind=kind)
    verdict, note = judge(mutant(), red, SESSION)
    if RED[kind][3]:
        assert (verdict, note) == ("killed", "")
    else:
        assert verdict == "broken"
        assert note.startswith("red only through crashes, no contract assertion failed: cases/test_equivalence.py::t (")
    verdict, note = judge(mutant(equivalent=True), red, SESSION)
    assert verdict == ("false alarm" if RED[kind][3] else "broken")


def test_the_crash_is_named_in_the_note() -> None:
    _, note = judge(mutant(), run(["cases/test_equivalence.py::t"], kind="harness crash"), SESSION)
    assert note.endswith("(TypeError: split() takes 3 positional arguments but 4 were given)")
    _, note = judge(mutant(), run(["cases/test_equivalence.py"], kind="collection error"), SESSION)
    assert note.endswith("cases/test_equivalence.py (collection failure)")


def test_a_group_gives_each_sub_exception() -> None:
    raised = raised_by(red_case("cases/test_equivalence.py::t", "group with an assertion"))
    assert raised == [
        ("ExceptionGroup", "Hypothesis found 2 distinct failures. (2 sub-exceptions)"),
        ("TypeError", "crash"),
        ("AssertionError", HEAD),
    ]


def test_only_the_target_of_the_run_heads_a_contract_verdict() -> None:
    case = red_case("cases/test_chunk_splitting.py::t", "contract pytest.fail")
    assert is_contract_verdict(case, SESSION)
    assert not is_contract_verdict(case, "megatron-0.13")


def test_sort_reds_splits_assertions_from_crashes() -> None:
    cases = [
        red_case("cases/test_equivalence.py::a", "rank timeout"),
        red_case("cases/test_equivalence.py::b", "fixture error"),
        red_case("cases/test_chunk_splitting.py::c", "contract pytest.fail"),
    ]
    caught, crashed = sort_reds(CaseRun(1, "", cases), SESSION)
    assert caught == ["cases/test_chunk_splitting.py::c", "cases/test_equivalence.py::a"]
    assert crashed == {"cases/test_equivalence.py::b": 'failed on setup with "RuntimeError: fixture broke"'}


@pytest.mark.parametrize(
    ("equivalent", "case_run", "verdict", "note"),
    [
        (False, run(["cases/test_equivalence.py::t"]), "killed", ""),
        (
            False,
            run(["cases/test_import_side_effects.py::t"]),
            "killed",
            "caught only by import-side-effects, not by its own family",
        ),
        (False, run([], 0), "survived", ""),
        (True, run(["cases/test_chunk_splitting.py::t"]), "false alarm", ""),
        (True, run([], 0), "ok", ""),
        (False, run([], 4), "error", "pytest exit 4: output"),
        (
            False,
            run(["cases/test_equivalence.py"], 2, kind="collection error"),
            "broken",
            "red only through crashes, no contract assertion failed: cases/test_equivalence.py (collection failure)",
        ),
    ],
)
def test_verdicts(equivalent: bool, case_run: CaseRun, verdict: str, note: str) -> None:
    assert judge(mutant(equivalent), case_run, SESSION) == (verdict, note)


def test_an_assertion_beside_a_crash_still_judges_and_names_the_crash() -> None:
    cases = [
        red_case("cases/test_chunk_splitting.py::a", "assertion"),
        red_case("cases/test_chunk_splitting.py::b", "harness crash"),
    ]
    verdict, note = judge(mutant(equivalent=True), CaseRun(1, "", cases), SESSION)
    assert verdict == "false alarm"
    assert note.startswith(
        "also red only through crashes, no contract assertion failed: cases/test_chunk_splitting.py::b ("
    )


def outcome(verdict: str, equivalent: bool = False, **details: Any) -> Outcome:
    return Outcome(
        f"m_{verdict}", "subject", SESSION, None if equivalent else "equivalence", equivalent, verdict, **details
    )


def test_broken_runs_are_counted_apart_and_fail_the_run(tmp_path: Path) -> None:
    crashed = {"cases/test_equivalence.py::t": "TypeError: boom"}
    outcomes = [
        outcome("killed", caught_by=["cases/test_equivalence.py::t"]),
        outcome("broken", crashed=crashed, note="red only through crashes"),
        outcome("ok", equivalent=True),
        outcome("broken", equivalent=True, crashed=crashed),
    ]
    report = Report([SESSION], "harness.reference", outcomes, 12.0)
    assert report.kill_rate() == 0.5, "a broken run is no kill, and still counts in the kill rate's denominator"
    assert report.false_alarm_rate() == 0.0, "an equivalent mutant that only crashed is no false alarm"
    assert [o.verdict for o in report.failures()] == ["broken", "broken"]
    line = summary_line(report)
    assert line.startswith("kill rate 50%, false-alarm rate 0%, 2 broken (red only through crashes, not kills) ")
    assert "(1 killed, 1 ok)" in line
    markdown, data = write_report(report, tmp_path)
    text = markdown.read_text()
    assert "## Broken runs" in text and "## Failures" not in text
    assert "- `m_broken` on megatron-0.15:\n  - `cases/test_equivalence.py::t`: TypeError: boom" in text
    document = json.loads(data.read_text())
    assert document["counts"]["broken"] == 2 and document["counts"]["killed"] == 1
    assert document["broken"][0] == {"mutant": "m_broken", "target": SESSION, "crashed": crashed}
    assert document["outcomes"][1]["crashed"] == crashed


def test_a_mutant_caught_by_a_finding_names_its_family_and_the_text() -> None:
    document = copy.deepcopy(VALID)
    document["mutants"][0]["finding"] = "does not bound: _resync"
    mutant = cat.parse_catalogue(document, KNOWN)[0]
    assert (mutant.finding, mutant.equivalent, mutant.family) == (
        "does not bound: _resync",
        False,
        VALID["mutants"][0]["family"],
    )
    shipped = {m.id: m for m in catalogue()}["upstream_second_coalesced_reduction"]
    assert shipped.family == "equivalence" and "_resync_sequence_parallel_grads" in str(shipped.finding)


def test_mutants_share_warm_runs_by_target_kind_and_selection_except_on_a_copy() -> None:
    """Every job once; a mutant that edits more than modules (a copy), or one not applicable, alone; the rest in warm
    runs of one target, kind, selection and equivalence, at most four each, spread over the workers."""
    module = (cat.Edit("core/x.py", "a", "b"),)
    readme = (cat.Edit("core/README.md", "a", "b"),)

    def megatron(name: str, edits: tuple[cat.Edit, ...] = module, equivalent: bool = False) -> cat.Mutant:
        family = None if equivalent else "equivalence"
        return cat.Mutant(name, "megatron", ("t1",), "w", family, equivalent=equivalent, edits=edits)

    in_place = [megatron(f"m{i}") for i in range(9)]
    jobs = [
        *((m, "t1") for m in in_place),
        (megatron("copied", readme), "t1"),
        (megatron("kept", equivalent=True), "t1"),
        (in_place[0], "t2"),
        *((cat.Mutant(f"s{i}", "subject", ("t1",), "w", "chunk-splitting", subject="x.py"), "t1") for i in range(3)),
    ]
    units = _batches(jobs, workers=2)
    assert sorted((m.id, t) for unit in units for m, t in unit) == sorted((m.id, t) for m, t in jobs)
    alone = sorted(unit[0][0].id + "@" + unit[0][1] for unit in units if len(unit) == 1)
    assert alone == ["copied@t1", "kept@t1", "m0@t2", "s1@t1"]
    for unit in units:
        assert len(unit) <= 4 and len({(m.kind, m.equivalent, tuple(m.selection()), t) for m, t in unit}) == 1, unit
    assert sorted(len(u) for u in units if u[0][0].id.startswith("m")) == [1, 2, 3, 4], "9 over 2 workers, and 1 on t2"
    assert sorted(len(u) for u in units if u[0][0].id.startswith("s")) == [1, 2]
