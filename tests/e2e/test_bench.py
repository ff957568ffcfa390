"""The bench measures what it says: a small real run on gloo ranks in a target venv, then its table and plot.

Times are not asserted (they belong to ``nox -s bench`` and the README); what is checked is that the figures the
bench reports are the right ones: the number of collectives and the largest buffer each method makes, and that the
peak-RSS measurement sees upstream's single buffer and the chunked one's budget.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.bench import report as bench_report
from tests.pytest_helpers import ROOT, target_python

MIB = 1 << 20
SESSION = "megatron-0.15"


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 MiB of grads in 8 or in 64 tensors on 2 ranks; upstream vs budgets of 4 and 8 MiB, one repeat."""
    out = tmp_path_factory.mktemp("bench")
    command = [
        str(target_python(SESSION)),
        "-m",
        "harness.bench.timing",
        "--out",
        str(out),
        "--world-sizes",
        "2",
        "--populations-mib",
        "32",
        "--budgets-mib",
        "4",
        "8",
        "--tensors",
        "8",
        "64",
        "--repeats",
        "1",
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    return out


def samples(out: Path, tensors: int) -> dict[str, dict]:
    document = json.loads((out / "bench.json").read_text())
    return {s["method"]: s for s in document["samples"] if s["tensors"] == tensors}


def shape(sample: dict) -> tuple[int, int]:
    return sample["collectives"], sample["largest_buffer_bytes"]


@pytest.mark.parametrize("tensors", [8, 64])
def test_upstream_makes_one_buffer_of_everything(small_bench: Path, tensors: int) -> None:
    measured = samples(small_bench, tensors)
    assert shape(measured["upstream"]) == (1, 32 * MIB)
    assert all(len(s["seconds"]) == 1 and s["median_s"] > 0 for s in measured.values())
    upstream = measured["upstream"]["peak_extra_rss_bytes"]
    assert upstream >= 30 * MIB, f"upstream's 32 MiB buffer should show in the peak RSS, saw {upstream / MIB:.1f} MiB"


@pytest.mark.parametrize("tensors", [8, 64])
def test_the_floor_reduces_the_same_bytes_without_allocating(small_bench: Path, tensors: int) -> None:
    """The floor makes no buffer at all: one collective per grad in place, or one over the buffer the grads view."""
    measured = samples(small_bench, tensors)
    assert shape(measured["floor in place"]) == (tensors, 32 * MIB // tensors)
    assert shape(measured["floor flat"]) == (1, 32 * MIB)
    assert measured["floor in place"]["peak_allocated_bytes"] == measured["floor flat"]["peak_allocated_bytes"] == 0
    assert measured["upstream"]["peak_allocated_bytes"] == 32 * MIB


def test_the_field_style_patch_flattens_each_chunk_into_a_fresh_buffer(small_bench: Path) -> None:
    """512 KiB grads under a 4 MiB budget: 8 chunks of 4 MiB, each flattened into a buffer of its own, so at least
    one chunk's bytes are allocated (two while the next is flattened before the last is freed)."""
    measured = samples(small_bench, 64)
    assert shape(measured["field 4 MiB"]) == (8, 4 * MIB)
    assert 4 * MIB <= measured["field 4 MiB"]["peak_allocated_bytes"] <= 8 * MIB


def test_large_grads_are_reduced_in_place(small_bench: Path) -> None:
    """4 MiB grads: one collective each, on the grad itself. The RSS rises only by gloo's scratch, half a grad on two
    ranks per reduction, with two reductions in flight; upstream's rise is all 32 MiB."""
    measured = samples(small_bench, 8)
    for method in ("budget 4 MiB", "budget 8 MiB"):
        assert shape(measured[method]) == (8, 4 * MIB), method
        peak = measured[method]["peak_extra_rss_bytes"]
        assert peak <= 5 * MIB, f"{method}: peak extra RSS {peak / MIB:.1f} MiB, more than two reductions' scratch"


def test_small_grads_side_by_side_are_packed_up_to_the_budget_and_reduced_where_they_lie(small_bench: Path) -> None:
    """512 KiB grads, views of one buffer: 8 per 4 MiB chunk, 16 per 8 MiB chunk, each chunk reduced through one view
    of the buffer. Nothing is allocated, and the RSS rises only by gloo's scratch (half a chunk on two ranks, two
    reductions in flight), not by 32 MiB as upstream's does."""
    measured = samples(small_bench, 64)
    assert shape(measured["budget 4 MiB"]) == (8, 4 * MIB)
    assert shape(measured["budget 8 MiB"]) == (4, 8 * MIB)
    for method, budget in (("budget 4 MiB", 4 * MIB), ("budget 8 MiB", 8 * MIB)):
        assert measured[method]["peak_allocated_bytes"] == 0, method
        peak = measured[method]["peak_extra_rss_bytes"]
        assert peak <= budget + MIB, f"{method}: peak extra RSS {peak / MIB:.1f} MiB, more than two reductions' scratch"


def test_table_and_plot_are_written(small_bench: Path) -> None:
    markdown, image = bench_report.write(small_bench, "nox -s bench -- --populations-mib 32")
    text = markdown.read_text()
    assert "`nox -s bench -- --populations-mib 32`" in text
    assert "| 2 | 32 | 64 | budget 8 MiB |" in text
    assert "| 2 | 32 | 64 | floor flat |" in text and "| 2 | 32 | 64 | field 4 MiB |" in text
    assert "| upstream s (peak allocated MiB) | floor / upstream | 4 MiB | 8 MiB |" in text
    assert "| 16 MiB | not run | ≤ 0.63x | n/a |" in text, "a goal not measured must say so, not pass"
    latency = json.loads((small_bench / "bench.json").read_text())["pool_overhead"]["small_allreduce_s"]
    assert sorted(latency) == ["2", "4"] and all(seconds > 0 for seconds in latency.values()), latency
    for size in latency:
        assert f"| one all-reduce of 64 fp32 on {size} warm gloo ranks" in text
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 10_000


def test_goal_rows_compare_the_ratio_with_the_goal() -> None:
    def sample(method: str, budget: int | None, median: float) -> dict:
        return {"world_size": 2, "population_bytes": 512 * MIB, "tensors": 64, "method": method,
                "budget_bytes": budget, "median_s": median}  # fmt: skip

    document = {"samples": [sample("upstream", None, 2.0), sample("budget 16 MiB", 16 * MIB, 1.2),
                            sample("budget 64 MiB", 64 * MIB, 1.6)]}  # fmt: skip
    rows = {budget: (measured, met) for budget, measured, _, met in bench_report.goal_rows(document)}
    assert rows[16] == (0.6, True)
    assert rows[64] == (0.8, False)
    assert rows[1024] == (None, None)
