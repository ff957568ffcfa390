"""The equivalence family goes red for each seeded all-reduce, naming rank and param (or the rank's traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pytest_helpers import SEEDED, SharedRuns, run_target_cases

SEEDED_BREAKS = {
    "equivalence_avg_as_sum": ("megatron-0.15", "differs from upstream, max |diff|"),
    "equivalence_skips_a_write_back": ("megatron-0.15", "differs from upstream, max |diff|"),
    "equivalence_wrong_group": ("megatron-0.15", "on a group other than the TP group upstream uses"),
    "equivalence_no_none_skip": ("megatron-0.15", "AttributeError: 'NoneType' object has no attribute 'data'"),
    "equivalence_no_qk_rule": ("megatron-0.15", "differs from upstream, max |diff|"),
    "equivalence_makes_grads_contiguous": ("megatron-0.15", "the grad object or its storage was replaced"),
    "equivalence_refuses_empty_grads": ("megatron-0.13", "ValueError: grad of decoder.layers."),
    "equivalence_stale_fsdp_flag": ("megatron-0.13", "has no attribute 'use_megatron_fsdp'"),
    "equivalence_ignores_fsdp": ("megatron-0.15", "has use_megatron_fsdp on: a DTensor sharded"),
    "equivalence_reads_first_chunk_config": ("megatron-0.15", "(chunk 1 has use_megatron_fsdp on"),
    "equivalence_spans_gaps": ("megatron-0.15", "differs from upstream, max |diff|"),
    "equivalence_rebinds_upstream_at_import": (
        "megatron-0.15",
        "upstream `_allreduce_non_tensor_model_parallel_grads` was replaced before the case ran (by",
    ),
    "equivalence_swaps_upstream_code": (
        "megatron-0.15",
        "upstream `_allreduce_non_tensor_model_parallel_grads` was replaced before the case ran: its `__code__` was "
        "swapped (now from",
    ),
    "equivalence_uninstall_keeps_replacement": (
        "megatron-0.15",
        "upstream `_allreduce_non_tensor_model_parallel_grads` was replaced",
    ),
}
"""Seeded breaks the generated modules catch. ``equivalence_flattens_everything`` is not among them: the memory bound
allows eight chunk-sized buffers, more than the small generated populations flatten at once; the largest-buffer case
below is the one that catches it."""
SELECTION = ("cases/test_equivalence.py::test_matches_upstream_on_generated_modules[world2-tp2-gloo]",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The seeded all-reduces of each target in one warm run."""
    plan = [(session, SELECTION, SEEDED / f"{seeded}.py") for seeded, (session, _) in SEEDED_BREAKS.items()]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("runs"), first_red=True)


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_allreduce_turns_the_family_red(seeded: str, runs: SharedRuns) -> None:
    session, named = SEEDED_BREAKS[seeded]
    run = runs.run(session, SELECTION, SEEDED / f"{seeded}.py")
    failed = run.require_red(seeded)
    assert any(named in text for text in failed.values()), f"{seeded}: no failure says {named!r}\n{run.output[-4000:]}"
    assert any("rank " in text for text in failed.values()), f"{seeded}: the failure names no rank"
    assert f"target {session} | contract equivalence | symbol allreduce_non_tensor_model_parallel_grads" in run.output


def test_flattening_everything_is_red_with_the_bytes_held_on_the_large_population(tmp_path: Path) -> None:
    """Budget-sized messages from one buffer of all 4 MiB: the collective sizes pass, the memory bound does not."""
    selection = ["cases/test_equivalence.py::test_largest_buffer_is_bounded_by_the_budget[gloo]"]
    run = run_target_cases("megatron-0.15", selection, tmp_path, subject=SEEDED / "equivalence_flattens_everything.py")
    failed = run.require_red("equivalence_flattens_everything")
    assert any("the subject held 4194304 bytes of tensors it allocated at once" in t for t in failed.values()), (
        run.output[-4000:]
    )
    memory = json.loads((tmp_path / "equivalence_memory.json").read_text())
    assert memory["subject_largest_buffer_bytes"] <= memory["budget_bytes"]
    assert memory["subject_peak_allocated_bytes"] == memory["upstream_peak_allocated_bytes"] == 4 << 20


def test_a_replacement_never_installed_turns_the_gpt_case_red(tmp_path: Path) -> None:
    """Upstream's grads are matched exactly when nothing is replaced: only the call check can see it."""
    selection = ["cases/test_equivalence.py::test_finalize_model_grads_on_a_real_gpt_model[plain-gloo]"]
    run = run_target_cases("megatron-0.15", selection, tmp_path, subject=SEEDED / "equivalence_never_installed.py")
    failed = run.require_red("equivalence_never_installed")
    assert any("left upstream in place" in text for text in failed.values()), run.output[-4000:]


def test_where_upstream_itself_raised_the_subject_may_raise_too_and_the_summary_says_so(tmp_path: Path) -> None:
    """megatron-core 0.13 fails on ``None`` grads itself; a subject that fails on them too does what Megatron does
    there: no red, and the summary's finding says so (0.14 on, where upstream skips them, it is red: the bite test
    above on 0.15)."""
    selection = ["cases/test_equivalence.py::test_matches_upstream_on_generated_modules[world2-tp2-gloo]"]
    run = run_target_cases("megatron-0.13", selection, tmp_path, subject=SEEDED / "equivalence_no_none_skip.py")
    assert run.returncode == 0, run.output[-4000:]
    findings = json.loads((tmp_path / "summary.json").read_text())["findings"]
    words = "upstream raised AttributeError: 'NoneType' object has no attribute 'data', and so did the subject"
    assert any(words in finding["text"] for finding in findings), findings


def test_a_subject_that_ignores_the_group_it_is_given_is_red_on_a_group_not_parallel_states(tmp_path: Path) -> None:
    """0.14 on passes ``tp_group``; world 4 with TP 2 also passes groups ({0, 2}, {1, 3}) that are not
    parallel_state's, which only a subject reducing within the group it is given matches."""
    selection = ["cases/test_equivalence.py::test_matches_upstream_on_generated_modules[world4-tp2-gloo]"]
    run = run_target_cases("megatron-0.15", selection, tmp_path, subject=SEEDED / "equivalence_ignores_given_group.py")
    failed = run.require_red("equivalence_ignores_given_group")
    assert any("a TP-sized group that is not parallel_state's passed as tp_group" in t for t in failed.values()), (
        run.output[-4000:]
    )
