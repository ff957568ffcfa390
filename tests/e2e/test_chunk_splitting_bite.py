"""The chunk-splitting family goes red, naming the broken property, for each seeded broken splitter."""

from __future__ import annotations

import re

import pytest

from harness.formats.environment import REFERENCE_SUBJECT
from tests.pytest_helpers import SEEDED, SharedRuns

SESSION = "megatron-0.15"
SELECTION = ("cases/test_chunk_splitting.py",)
# The linear-cost breaks and the measure each must be caught by: bytecode run in Python, or allocation in builtins.
COST_MEASURE = {
    "chunk_splitting_quadratic": "bytecode instructions executed",
    "chunk_splitting_quadratic_builtins": "bytes allocated",
}
SEEDED_BREAKS = {
    "chunk_splitting_off_by_one": "greedy tightness",
    "chunk_splitting_last_dropped": "partition",
    "chunk_splitting_oversize_merged": "oversize alone",
    "chunk_splitting_oversize_split": "partition",
    "chunk_splitting_misaligned": "alignment",
    "chunk_splitting_one_per_chunk": "greedy tightness",
    "chunk_splitting_counts_elements": "budget",
    "chunk_splitting_quadratic": "linear cost",
    "chunk_splitting_quadratic_builtins": "linear cost",
    "chunk_splitting_accepts_bad_budget": "budget validation",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """Every seeded splitter and the reference in one warm run. Every case runs (no first red): a splitter may break
    an earlier property too (the misaligned one breaks the partition), and each must be caught by its own."""
    subjects = [*(SEEDED / f"{seeded}.py" for seeded in SEEDED_BREAKS), REFERENCE_SUBJECT]
    return SharedRuns([(SESSION, SELECTION, subject) for subject in subjects], lambda: tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_splitter_turns_the_family_red(seeded: str, runs: SharedRuns) -> None:
    run = runs.run(SESSION, SELECTION, SEEDED / f"{seeded}.py")
    failed = run.require_red(seeded)
    prop = SEEDED_BREAKS[seeded]
    named = [name for name, text in failed.items() if f"property '{prop}' violated" in text]
    assert named, f"{seeded}: no failure names property {prop!r}; failed: {sorted(failed)}\n{run.output[-3000:]}"
    if seeded in COST_MEASURE:
        over = re.compile(rf"{COST_MEASURE[seeded]}: [^\n]*x \([^\n]*\), over the bound")
        assert any(over.search(failed[name]) for name in named), f"{seeded}: measure not named\n{failed[named[0]]}"
    assert f"target {SESSION} | contract chunk-splitting | symbol split_into_chunks" in run.output
    assert f"repro: MEGATRON_CONFORMANCE_SUBJECT={SEEDED / (seeded + '.py')} nox -R -s {SESSION} -- " in run.output


def test_reference_splitter_is_green(runs: SharedRuns) -> None:
    run = runs.run(SESSION, SELECTION)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]
