"""Adapters the gate was not written around: six frameworks under ``tests/frameworks/`` written blind (from Megatron's
source and a paragraph describing the job, never the gate's cases), each in its own style, each checked from a short
declaration. Every one must be green: a red here is either a bug of the adapter, which then stays as a seeded break
with a test of its own, or a false alarm of the gate, which gets fixed.

Each runs here on one target (the oldest API, or the newest provider call shape), to keep ``nox -s tests`` short
(a CI job runs two of them: kestrel on 0.16, grebe on 0.13); all four of megatron-0.13, -0.15, -0.16 and -0.19 are
run for each by
``MEGATRON_CONFORMANCE_SUBJECT=tests/frameworks/<name>/megatron-conformance.toml nox -s <target>``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pytest_helpers import ROOT, on_one_target, run_target_cases

FRAMEWORKS = ROOT / "tests" / "frameworks"
# framework -> (its style, the target it runs on here)
BLIND = {
    "kestrel": ("a fresh flattened buffer per chunk", "megatron-0.16"),
    "heron": ("in-place views of the grad buffer", "megatron-0.16"),
    "osprey": ("async handles, two chunks in flight", "megatron-0.16"),
    "plover": ("all_reduce bound at import, SUM then a division", "megatron-0.13"),
    "wren": ("the budget read from the environment and signatures inspected at import", "megatron-0.13"),
    "grebe": ("the patch applied when its module is imported; keywords filtered by name", "megatron-0.13"),
}


@pytest.mark.parametrize("framework", on_one_target(sorted(BLIND), ["kestrel"]))
def test_a_blind_framework_is_green(framework: str, tmp_path: Path) -> None:
    style, session = BLIND[framework]
    run = run_target_cases(session, ["cases"], tmp_path, subject=FRAMEWORKS / framework / "megatron-conformance.toml")
    assert run.returncode == 0, f"{framework} ({style}) on {session}: {run.failed() or run.output[-3000:]}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["subject_kind"] == "declaration"
    assert summary["counts"]["passed"] > 40, summary["counts"]
    not_declared = [name for name, (_, text) in run.verdicts.items() if "not declared" in text]
    assert not not_declared, not_declared
