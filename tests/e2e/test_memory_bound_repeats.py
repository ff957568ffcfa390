"""The memory bound gives the same verdict every time: 50 repeats of the largest-buffer case on a blind framework's
fresh-buffer-per-chunk design (its loop variable still holds the previous chunk's buffer, and gloo may hold one more)
are never red; a design that flattens every grad at once is red on every repeat. Counted in the CUDA caching
allocator's blocks (as on a GPU, here on CPU tensors) the verdicts are the same, including for grads so small that
the reference's staging buffer is a fraction of one block."""

from __future__ import annotations

import json
import subprocess

from harness.formats.environment import REFERENCE_SUBJECT
from tests.pytest_helpers import ROOT, SEEDED, target_python

SESSION = "megatron-0.15"


def repeats(subject: str, count: int, *options: str) -> dict:
    run = subprocess.run(
        [str(target_python(SESSION)), "-m", "tests.memory_repeats", subject, str(count), *options],
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


def test_in_cuda_blocks_the_reference_is_green_and_flattening_red() -> None:
    """The reference stages two 20-byte grads at a time in a 40-byte buffer: 512 bytes as a CUDA block, more than the
    384-byte bound in raw bytes, well within eight blocks; flattening all 20 KiB exceeds the block bound."""
    host = repeats(REFERENCE_SUBJECT, 1, "--population", "tiny", "--allocator", "host")
    assert (host["red"], host["peak_bytes_max"], host["bound_bytes"]) == (0, 40, 384), host
    reference = repeats(REFERENCE_SUBJECT, 2, "--population", "tiny", "--allocator", "cuda")
    assert (reference["red"], reference["bound_bytes"]) == (0, 4096), reference
    assert host["bound_bytes"] < reference["peak_bytes_max"] <= reference["bound_bytes"], reference
    flattened = repeats(
        str(SEEDED / "equivalence_flattens_everything.py"), 2, "--population", "tiny", "--allocator", "cuda"
    )
    assert flattened["red"] == 2 and flattened["peak_bytes_min"] == 20480, flattened
    assert flattened["bound_bytes"] == 4096, flattened
