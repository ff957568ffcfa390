"""The model-provider family goes red for each seeded broken wrapper, naming the target, call shape and keyword.

Every run is the real thing: the target's venv, its real Megatron and GPTModel, the seeded wrapper named through
``--subject``. The fixed-signature wrapper is the breakage a downstream framework met when Megatron 0.16 began to pass
``config=``/``pg_collection=``: it must stay green where the call shape has no such keyword and go red where it has.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.formats.environment import REFERENCE_SUBJECT
from tests.pytest_helpers import ROOT, SEEDED, RunVerdicts, SharedRuns, run_target_cases

CASES = ("cases/test_model_provider.py",)
PROCESS_GROUP_CASE = "cases/test_model_provider.py::test_matrix_records_the_installed_process_group_keyword"
REAL_MODEL_CASE = "test_real_gpt_model_through_the_wrapper"
CALL_SHAPES_CASE = "cases/test_model_provider.py::test_matrix_records_the_call_shapes_megatron_makes"
NEWEST_TARGET = "megatron-0.19"

# Seeded wrapper -> (target it is run on, what some failure message must say below its "[target] model-provider" head).
SEEDED_BREAKS = {
    "model_provider_fixed_signature": (
        "megatron-0.16",
        "call shape 'plain': keyword 'config'",
    ),
    "model_provider_vp_stage_dropped": (
        "megatron-0.15",
        "call shape 'virtual_pipeline': keyword 'vp_stage'",
    ),
    "model_provider_config_forced": ("megatron-0.16", "call shape 'plain': keyword 'config'"),
    "model_provider_none_invented": (
        "megatron-0.15",
        "call shape 'plain': keyword 'vp_stage'",
    ),
    "model_provider_freeze_on_provider": (
        "megatron-0.15",
        "call shape 'plain': freeze rules",
    ),
    "model_provider_error_replaced": (
        "megatron-0.15",
        "call shape 'plain': inner provider error",
    ),
}


def assert_red(run: RunVerdicts, label: str, session: str, message: str) -> None:
    failed = run.require_red(f"{label} on {session}")
    named = [name for name, text in failed.items() if message in text and f"[{session}] model-provider: " in text]
    assert named, f"{label}: no failure says {message!r}; failed: {sorted(failed)}\n{run.output[-3000:]}"
    assert f"target {session} | contract model-provider | symbol wrap_model_provider" in run.output


FIXED_SIGNATURE = SEEDED / "model_provider_fixed_signature.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The seeded wrappers, the fixed signature and the reference of each target in one warm run."""
    plan = [(session, CASES, SEEDED / f"{seeded}.py") for seeded, (session, _) in SEEDED_BREAKS.items()]
    plan += [(session, CASES, FIXED_SIGNATURE) for session in ("megatron-0.13", "megatron-0.15")]
    plan += [(session, CASES, REFERENCE_SUBJECT) for session in ("megatron-0.15", "megatron-0.16")]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("seeded", sorted(SEEDED_BREAKS))
def test_seeded_wrapper_turns_the_family_red(seeded: str, runs: SharedRuns) -> None:
    session, message = SEEDED_BREAKS[seeded]
    run = runs.run(session, CASES, SEEDED / f"{seeded}.py")
    assert_red(run, seeded, session, message)
    assert f"repro: MEGATRON_CONFORMANCE_SUBJECT={SEEDED / (seeded + '.py')} nox -R -s {session} -- " in run.output


def test_fixed_signature_is_green_where_no_new_keyword_is_passed(runs: SharedRuns) -> None:
    run = runs.run("megatron-0.15", CASES, FIXED_SIGNATURE)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]


def test_fixed_signature_breaks_only_the_encoder_decoder_shape_of_0_13(runs: SharedRuns) -> None:
    """0.13's encoder-decoder branch passes ``add_encoder``/``add_decoder``, which the fixed signature also refuses."""
    run = runs.run("megatron-0.13", CASES, FIXED_SIGNATURE)
    assert_red(
        run, "model_provider_fixed_signature", "megatron-0.13", "call shape 'encoder_decoder': keyword 'add_encoder'"
    )
    for shape in ("plain", "virtual_pipeline"):
        verdict = run.verdicts.get(f"{REAL_MODEL_CASE}[{shape}]", ("missing", ""))[0]
        assert verdict == "passed", f"the real-model case on shape {shape!r} is {verdict}\n{run.output[-3000:]}"
        named = [name for name, text in run.failed().items() if f"call shape '{shape}'" in text]
        assert not named, f"failures {named} blame shape {shape!r}, which the fixed signature handles"


@pytest.mark.parametrize("session", ["megatron-0.15", "megatron-0.16"])
def test_reference_wrapper_is_green(session: str, runs: SharedRuns) -> None:
    run = runs.run(session, CASES)
    assert run.returncode == 0 and not run.failed(), run.output[-3000:]


def matrix_with(tmp_path: Path, session: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of matrix.yaml, its relative paths made absolute, with ``edit`` applied to ``session``'s provider."""
    document = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    for entry in document["targets"]:
        entry["expected_failures"] = str(ROOT / entry["expected_failures"])
        for kind in ("wheel", "tree"):
            if kind in entry["megatron"]:
                entry["megatron"][kind] = str(ROOT / entry["megatron"][kind])
        if entry["session"] == session:
            edit(entry["provider"])
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("session", "stale", "installed"),
    [("megatron-0.15", "model_comm_pgs", "pg_collection"), ("megatron-0.13", "pg_collection", None)],
)
def test_stale_process_group_keyword_is_caught(session: str, stale: str, installed: str | None, tmp_path: Path) -> None:
    matrix = matrix_with(tmp_path, session, lambda provider: provider.update(process_group_keyword=stale))
    run = run_target_cases(session, [PROCESS_GROUP_CASE], tmp_path, extra=[f"--matrix={matrix}"])
    takes = repr(installed) if installed else "no process-group parameter"
    message = f"[{session}] model-provider: process_group_keyword: the matrix records {stale!r} but the installed "
    assert_red(run, "stale matrix", session, message)
    assert f"GPTModel.__init__ takes {takes}" in run.output, run.output[-3000:]


def drop_config_add_flag(provider: dict[str, Any]) -> None:
    """The plain shape as 0.15 recorded it (no ``config``), plus a keyword no Megatron passes."""
    provider["calls"]["plain"] = [k for k in provider["calls"]["plain"] if k != "config"] + ["is_first_chunk"]


def test_stale_call_shapes_are_caught_from_megatrons_own_get_model(tmp_path: Path) -> None:
    session = NEWEST_TARGET
    matrix = matrix_with(tmp_path, session, drop_config_add_flag)
    run = run_target_cases(session, [CALL_SHAPES_CASE], tmp_path, extra=[f"--matrix={matrix}"])
    assert_red(run, "stale call shapes", session, f"[{session}] model-provider: calls: the matrix entry is stale")
    assert re.search(r"training\.py:\d+: Megatron passes keyword 'config' in shape 'plain'", run.output), run.output
    assert re.search(r"training\.py:\d+: the matrix lists keyword 'is_first_chunk' in shape 'plain'", run.output)
