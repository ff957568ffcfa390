"""The soak's plan and its accounting, without target venvs: which subject runs which cases, and how a session that
is not green is counted and replayed (the soak itself runs by hand on built targets: ``nox -s soak``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import REPO_ROOT
from harness.formats.environment import REFERENCE_SUBJECT
from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.plugin.families import family_of_case
from harness.sensitivity import soak
from harness.targets.matrix import load_matrix

KNOWN = [target.session for target in load_matrix(REPO_ROOT / "matrix.yaml").targets]


def test_every_correct_variant_runs_on_its_familys_case_file_where_the_catalogue_runs_it() -> None:
    variants = soak.correct_variants(KNOWN)
    files = {Path(path).name for path in variants}
    on_disk = {p.name for p in soak.CORRECT.glob("*.py") if p.name not in ("__init__.py", "variant.py")}
    assert files == on_disk and files
    for path, (case_file, _) in variants.items():
        owner = family_of_case(case_file)
        assert owner is not None and Path(path).stem.startswith(owner.name.replace("-", "_"))
    # A static method some release lacks: a right subject only where Megatron has it.
    static = str(soak.CORRECT / "api_fingerprint_static_method_kept_static.py")
    assert "megatron-0.13" not in variants[static][1] and "megatron-0.15" in variants[static][1]
    planned_013 = [subject for _, subjects in soak._plan("megatron-0.13", variants) for subject in subjects]
    assert static not in planned_013 and planned_013[0] == REFERENCE_SUBJECT


def test_a_session_that_is_not_green_is_counted_with_its_seed_and_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    statuses = {REFERENCE_SUBJECT: 1}
    commands = []

    def fake_runs(command: list[str], timeout: float) -> tuple[int, list[SimpleNamespace]]:
        commands.append(command)
        named = [part.split("=", 1)[1] for part in command if part.startswith("--subject=")] or [REFERENCE_SUBJECT]
        runs = []
        for subject in named:
            status = GATE_ERROR_STATUS if subject.endswith("chunk_splitting_reversed.py") else statuses.get(subject, 0)
            failed = {"cases/test_chunk_splitting.py::test_partition": "red"} if status else {}
            runs.append(SimpleNamespace(returncode=status, failed=lambda failed=failed: failed))
        return 0, runs

    monkeypatch.setattr(soak, "subject_runs", fake_runs)
    lines: list[str] = []
    result = soak.soak({"megatron-0.15": Path("python")}, KNOWN, 1, lines.append, seeds=[1234])
    verdicts = {soak.subject_name(o.subject): o.verdict for o in result.outcomes}
    assert verdicts.pop(REFERENCE_SUBJECT) == "false red" and verdicts.pop("chunk_splitting_reversed") == "gate error"
    assert set(verdicts.values()) == {"green"}
    assert all("--hypothesis-seed=1234" in command and "--hypothesis-profile=soak" in command for command in commands)
    red = result.not_green()[0]
    assert red.replay == "nox -R -s megatron-0.15 -- cases --hypothesis-profile=soak --hypothesis-seed=1234"
    assert "1 false red(s), 1 gate error(s), 0 broken" in result.summary()
    assert lines == [lines[0]] and "seed 1234" in lines[0] and "false red: harness.reference" in lines[0]
