"""Correct variants of the reference subject stay green (``harness/sensitivity/correct/``): each does one thing its
own way that correct adapters do, and the gate must not mistake it for a break."""

from __future__ import annotations

import json

import pytest

from tests.pytest_helpers import ROOT, SharedRuns

SESSION = "megatron-0.15"
CORRECT = ROOT / "harness" / "sensitivity" / "correct"
OPS_ADVISORY = "test_reduces_with_upstreams_ops"
# variant -> (case file, advisories it must show: the style it has, named, never a red)
VARIANTS = {
    "chunk_splitting_reversed": ("cases/test_chunk_splitting.py", {"test_order", "test_greedy_tightness"}),
    "equivalence_bound_at_import": ("cases/test_equivalence.py", set()),
    "equivalence_sum_then_divide": ("cases/test_equivalence.py", {OPS_ADVISORY}),
    "import_side_effects_reads_budget_variable": ("cases/test_import_side_effects.py", set()),
    "import_side_effects_inspects_megatron": ("cases/test_import_side_effects.py", set()),
    "api_fingerprint_replacement_forwards_kwargs": (
        "cases/test_api_fingerprint.py",
        {"test_what_megatron_does_with_each_replacement_is_decided"},
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The variants of each case file in one warm run."""
    plan = [(SESSION, (case_file,), CORRECT / f"{variant}.py") for variant, (case_file, _) in VARIANTS.items()]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_correct_variant_is_green(variant: str, runs: SharedRuns) -> None:
    case_file, advisories = VARIANTS[variant]
    run = runs.run(SESSION, (case_file,), CORRECT / f"{variant}.py")
    assert run.returncode == 0, f"{variant}: {run.failed() or run.output[-3000:]}"
    assert run.report_dir is not None
    summary = json.loads((run.report_dir / "summary.json").read_text())
    advised = {advisory["case"].split("::")[-1].split("[")[0] for advisory in summary["advisories"]}
    assert advised == advisories, summary["advisories"]
    if variant == "import_side_effects_reads_budget_variable":
        waived = [w for w in summary["waivers"] if w["kind"] == "env-read"]
        assert [w["name"] for w in waived] == ["MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES"] * len(waived) and waived
        assert all("reads_budget_at_import/__init__.py:" in w.get("detail", "") for w in waived), waived
