"""The session watch sees every change a subject's code makes to Megatron's classes after a case, in the gate's
process and in the rank processes, and names the case; a reference run stays green (the watch's false-alarm side is
the green gates of every target)."""

from __future__ import annotations

from pathlib import Path

from tests.pytest_helpers import SEEDED, run_target_cases

SESSION = "megatron-0.15"
DDP_METHOD = (
    "class-attribute megatron.core.distributed.distributed_data_parallel.DistributedDataParallel.start_grad_sync"
)
UNINSTALL_CASE = "test_after_uninstall_finalize_model_grads_reaches_upstream"


def test_a_class_method_rebound_by_a_case_in_the_gate_process_is_red_naming_it(tmp_path: Path) -> None:
    selection = [
        f"cases/test_import_side_effects.py::{UNINSTALL_CASE}",
        "cases/test_chunk_splitting.py::test_partition",
    ]
    subject = SEEDED / "import_side_effects_rebinds_ddp_method_in_a_case.py"
    run = run_target_cases(SESSION, selection, tmp_path, subject=subject)
    failed = run.require_red("import_side_effects_rebinds_ddp_method_in_a_case")
    assert list(failed) == [UNINSTALL_CASE], failed
    text = failed[UNINSTALL_CASE]
    assert f"changed during cases/test_import_side_effects.py::{UNINSTALL_CASE}" in text and DDP_METHOD in text, text
    assert "rank " not in text.split("changed during", 1)[1].splitlines()[1], text


def test_a_class_method_rebound_inside_the_ranks_is_red_naming_rank_and_case(tmp_path: Path) -> None:
    case = "test_matches_upstream_on_generated_modules[world2-tp2-gloo]"
    selection = [f"cases/test_equivalence.py::{case}", "cases/test_chunk_splitting.py::test_partition"]
    subject = SEEDED / "import_side_effects_rebinds_ddp_method_in_a_rank.py"
    run = run_target_cases(SESSION, selection, tmp_path, subject=subject)
    failed = run.require_red("import_side_effects_rebinds_ddp_method_in_a_rank")
    assert list(failed) == [case], failed
    assert f"rank 0: {DDP_METHOD}" in failed[case] and f"rank 1: {DDP_METHOD}" in failed[case], failed[case]
    assert "test_partition" not in failed, "a change is told once, after the case that made it"
