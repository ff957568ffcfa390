"""The memory bound gives the same verdict every time: 50 repeats of the largest-buffer case on a blind framework's
fresh-buffer-per-chunk design (its loop variable still holds the previous chunk's buffer, and gloo may hold one more)
are never red; a design that flattens every grad at once is red on every repeat."""

from __future__ import annotations

import json
import subprocess

from tests.pytest_helpers import ROOT, SEEDED, target_python

SESSION = "megatron-0.15"


def repeats(subject: str, count: int) -> dict:
    run = subprocess.run(
        [str(target_python(SESSION)), "-m", "tests.memory_repeats", subject, str(count)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_fresh_buffer_per_chunk_is_never_red() -> None:
    kestrel = ROOT / "tests" / "frameworks" / "kestrel" / "megatron-conformance.toml"
    result = repeats(str(kestrel), 50)
    assert result["red"] == 0, result


def test_holding_every_grad_at_once_is_always_red() -> None:
    result = repeats(str(SEEDED / "equivalence_flattens_everything.py"), 5)
    assert result["red"] == 5, result
    assert any("bytes of tensors it allocated at once" in problem for problem in result["problems"]), result
