"""The scale estimate against what a real step does: on the tiny CPU GPT, the bytes each coalesced reduction
flattens on the meta device equal those the real step flattens, byte for byte; counting elements instead of bytes
is caught; a second coalesced reduction seeded into Megatron shows in the table; every preset builds and is
measured on every target, the dense one equal to its hand calculation; and a session's fork of its fork server
measures what a fresh interpreter does."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.formats.scale_findings import CHANGES_NOTHING, DEFAULT_MODELS
from harness.plugin.scale_estimate import measure_in_target
from harness.reports.scale_table import scale_markdown
from tests.pytest_helpers import ROOT, on_one_target, target_python

TARGETS = ("megatron-0.13", "megatron-0.15", "megatron-0.16", "megatron-0.19")
UPSTREAM = "_allreduce_non_tensor_model_parallel_grads"
LLAMA_70B_NORMS = (80 * 2 + 1) * 8192 * 4
"""Llama-3.1-70B under TP 8 + SP: two RMSNorm weights per layer and the final one, hidden 8192, fp32 main grads."""


def scale_check(session: str, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(target_python(session)), "-m", "tests.scale_check", mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("session", on_one_target(TARGETS, ["megatron-0.15"]))
def test_meta_bytes_equal_the_real_steps_byte_for_byte(session: str) -> None:
    checked = scale_check(session, "plain")
    assert checked["problems"] == []
    assert [r["name"] for r in checked["meta"]["reductions"]] == [UPSTREAM]
    assert checked["real"][UPSTREAM] == checked["meta"]["reductions"][0]["upstream_bytes"] == 896


def test_counting_elements_instead_of_bytes_is_caught() -> None:
    checked = scale_check("megatron-0.15", "elements")
    assert checked["problems"] == [f"{UPSTREAM}: 224 bytes on the meta device, 896 in the real step"]


def test_a_second_coalesced_reduction_shows_in_the_table() -> None:
    checked = scale_check("megatron-0.15", "mutant")
    reached = {r["name"]: r["upstream_bytes"] for r in checked["meta"]["reductions"]}
    assert reached == {UPSTREAM: 896, "_allreduce_seeded_extra_grads": 896}
    table = scale_markdown({"megatron-0.15": [{**checked["meta"], "layout": "TP 2 + SP"}]})
    assert "| &nbsp;&nbsp;`_allreduce_seeded_extra_grads` | 896 B in 1 |" in table


@pytest.mark.parametrize("session", on_one_target(TARGETS, ["megatron-0.19"]))
def test_every_preset_is_measured_on_every_target(session: str, tmp_path: Path) -> None:
    request = {"models": list(DEFAULT_MODELS), "subject": "harness.reference", "budget": 4 << 20}
    results = {r["model"]: r for r in measure_in_target(request, str(target_python(session)))}
    assert list(results) == [m["preset"] for m in DEFAULT_MODELS]
    assert [r.get("error") for r in results.values()] == [None] * len(DEFAULT_MODELS)
    llama = {r["name"]: r for r in results["llama-70b"]["reductions"]}
    assert llama[UPSTREAM]["upstream_bytes"] == LLAMA_70B_NORMS
    assert llama[UPSTREAM]["subject_bytes"] <= 4 << 20 < LLAMA_70B_NORMS
    assert results["llama-70b"]["verdict"].startswith("upstream coalesces 5,275,648 B (5 MiB) in one buffer")


FLATTENS_EVERYTHING = '''"""Seeded: every sequence-parallel grad in one buffer, reduced in views of the budget."""
import importlib

import torch
from torch._utils import _flatten_dense_tensors

_FINALIZE = "megatron.core.distributed.finalize_model_grads"
_NAME = "_allreduce_non_tensor_model_parallel_grads"
_state = {"budget": 1 << 30, "original": None}


def allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    from megatron.core import parallel_state

    grads = [p.main_grad for chunk in model for p in chunk.parameters() if getattr(p, "sequence_parallel", False)]
    flat = _flatten_dense_tensors(grads)
    step = _state["budget"] // flat.element_size()
    for start in range(0, flat.numel(), step):
        torch.distributed.all_reduce(flat[start : start + step], group=parallel_state.get_tensor_model_parallel_group())


def install(budget_bytes=None):
    module = importlib.import_module(_FINALIZE)
    _state["original"] = getattr(module, _NAME)
    _state["budget"] = budget_bytes or _state["budget"]
    setattr(module, _NAME, allreduce_non_tensor_model_parallel_grads)


def uninstall():
    setattr(importlib.import_module(_FINALIZE), _NAME, _state["original"])
'''


def test_a_subject_that_flattens_everything_is_judged_by_its_buffer_not_its_messages(tmp_path: Path) -> None:
    """Messages within the budget say nothing of memory: the buffer the subject made is what the verdict weighs."""
    subject = tmp_path / "flattens_everything.py"
    subject.write_text(FLATTENS_EVERYTHING)
    request = {"models": [{"preset": "llama-70b", "tp": 8, "sp": True}], "subject": str(subject), "budget": 1 << 20}
    (found,) = measure_in_target(request, str(target_python("megatron-0.15")))
    (reduction,) = found["reductions"]
    assert reduction["subject_bytes"] == 1 << 20 and reduction["subject_collectives"] == 6
    assert reduction["subject_buffer"] == reduction["upstream_bytes"] == LLAMA_70B_NORMS
    assert found["verdict"] == CHANGES_NOTHING


FROM_THE_FORK_SERVER = """
import json, sys
from harness.plugin.scale_estimate import measure_in_target
print(json.dumps(measure_in_target(json.loads(sys.argv[1]))))
"""


def test_a_fork_of_the_fork_server_measures_what_a_fresh_interpreter_does() -> None:
    """In a session the estimate runs in a process forked from the fork server (torch and Megatron imported once);
    its results are the fresh interpreter's, field for field, the subject's included."""
    request = {
        "models": [{"preset": "llama-70b", "tp": 8, "sp": True}, {"preset": "no-such-preset"}],
        "subject": str(ROOT / "tests" / "frameworks" / "modernrl" / "megatron-conformance.toml"),
        "budget": 1 << 20,
    }
    python = str(target_python("megatron-0.15"))
    fresh = measure_in_target(request, python)
    done = subprocess.run(
        [python, "-c", FROM_THE_FORK_SERVER, json.dumps(request)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    assert forked == fresh
    assert fresh[0]["reductions"][0]["subject_bytes"] <= 1 << 20 < fresh[0]["reductions"][0]["upstream_bytes"]
    assert "no-such-preset" in fresh[1]["error"]
