"""The chunk-splitting family goes red, naming the broken property, for each seeded broken splitter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pytest_helpers import SEEDED, run_target_cases

SESSION = "megatron-0.15"
# The linear-cost breaks and the measure each must be caught by: bytecode run in Python, or allocation in builtins.
COST_MEASURE = {"chunks_quadratic": "bytecode instructions executed", "chunks_quadratic_builtins": "bytes allocated"}
SEEDED_BREAKS = {
    "chunks_off_by_one": "greedy tightness",
    "chunks_last_dropped": "partition",
    "chunks_oversize_merged": "oversize alone",
    "chunks_oversize_split": "partition",
    "chunks_reversed": "partition",
    "chunks_misaligned": "alignment",
    "chunks_one_per_chunk": "greedy tightness",
    "chunks_counts_elements": "budget",
    "chunks_quadratic": "linear cost",
    "chunks_quadratic_builtins": "linear cost",
    "chunks_accepts_bad_budget": "budget validation",
}


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_splitter_turns_the_family_red(seeded: str, tmp_path: Path) -> None:
    run = run_target_cases(SESSION, ["cases/test_chunks.py"], tmp_path, subject=SEEDED / f"{seeded}.py")
    failed = run.require_red(seeded)
    prop = SEEDED_BREAKS[seeded]
    named = [name for name, text in failed.items() if f"property '{prop}' violated" in text]
    assert named, f"{seeded}: no failure names property {prop!r}; failed: {sorted(failed)}\n{run.output[-3000:]}"
    if seeded in COST_MEASURE:
        over = re.compile(rf"{COST_MEASURE[seeded]}: [^\n]*x \([^\n]*\), over the bound")
        assert any(over.search(failed[name]) for name in named), f"{seeded}: measure not named\n{failed[named[0]]}"
    assert f"target {SESSION} | contract chunk-splitting | symbol split_into_chunks" in run.output
    assert f"repro: MEGATRON_CONFORMANCE_SUBJECT={SEEDED / (seeded + '.py')} nox -R -s {SESSION} -- " in run.output


def test_reference_splitter_is_green(tmp_path: Path) -> None:
    run = run_target_cases(SESSION, ["cases/test_chunks.py"], tmp_path)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]
