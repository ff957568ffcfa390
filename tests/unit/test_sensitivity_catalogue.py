"""The mutant catalogue's validation, the making of a mutated copy, and the verdicts: no target venv needed.

The catalogue ships with its seeded subjects (``harness/sensitivity/seeded/``), so a copy of the gate without
``tests/`` can run ``nox -s sensitivity``; ``test_catalogue_works_from_a_copy_without_tests`` proves it.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness import REPO_ROOT
from harness.formats.junit import parse_case
from harness.plugin.command import CaseRun
from harness.plugin.families import MUTABLE
from harness.sensitivity import catalogue as cat
from harness.sensitivity.mutate import MutationError, build_mutant_package
from harness.sensitivity.runner import judge
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
            "subject": "seeded/chunks_reversed.py",
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
    subjects = [m for m in mutants if m.kind == "subject"]
    assert len(subjects) >= 15
    assert {m.family for m in subjects} == families
    assert {m.family for m in must_catch} == families - {"chunk-splitting"}


def test_subject_mutants_live_beside_the_catalogue() -> None:
    seeded = cat.CATALOGUE.parent / "seeded"
    for mutant in catalogue():
        if mutant.kind == "subject":
            assert Path(str(mutant.subject)).is_relative_to(seeded), mutant


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


def run(failed: list[str], returncode: int = 1) -> CaseRun:
    """A case run whose JUnit holds a failure for each of ``failed`` (``cases/test_x.py::name`` or a module)."""
    cases = []
    for nodeid in failed:
        module, _, name = nodeid.partition("::")
        dotted = module.removesuffix(".py").replace("/", ".")
        classname, name = (dotted, name) if name else ("", dotted)
        element = ET.fromstring(f'<testcase classname="{classname}" name="{name}"><failure message="m"/></testcase>')
        cases.append(parse_case(element))
    return CaseRun(returncode, "output", cases)


@pytest.mark.parametrize(
    ("equivalent", "case_run", "verdict", "note"),
    [
        (False, run(["cases/test_equivalence.py::t"]), "killed", ""),
        (
            False,
            run(["cases/test_import.py::t"]),
            "killed",
            "caught only by import-side-effects, not by its own family",
        ),
        (False, run(["cases/test_equivalence.py"]), "killed", ""),
        (False, run([], 0), "survived", ""),
        (True, run(["cases/test_chunks.py::t"]), "false alarm", ""),
        (True, run([], 0), "ok", ""),
        (False, run([], 4), "error", "pytest exit 4: output"),
    ],
)
def test_verdicts(equivalent: bool, case_run: CaseRun, verdict: str, note: str) -> None:
    family = None if equivalent else "equivalence"
    mutant = cat.Mutant("m", "megatron", (SESSION,), "w", family, equivalent, (cat.Edit("f", "a", "b"),))
    assert judge(mutant, case_run) == (verdict, note)
