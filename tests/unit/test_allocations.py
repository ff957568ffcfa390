"""The allocation tracker of the equivalence family: peak of live bytes, storages that die, views and in-place ops
that allocate nothing, collectives under the mode, the devices tensors are made on; and the memory bound's wording."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from harness.contracts import allocations, cuda_allocator, rank_report
from harness.contracts.allocations import Allocation, AllocationSummary, AllocationTracker
from harness.contracts.cuda_allocator import allocated_bytes_at_most, block_bytes, segment_bytes


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "rendezvous"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def grads(count: int = 8, numel: int = 1000) -> list[torch.Tensor]:
    return [torch.randn(numel) for _ in range(count)]


def test_a_factory_call_and_a_new_op_output_are_allocations() -> None:
    x = torch.randn(100)
    with AllocationTracker("cpu") as tracker:
        buffer = torch.empty(50, dtype=torch.float64)
        doubled = x * 2
    summary = tracker.summary()
    assert summary.count == 2
    assert summary.total_bytes == 400 + 400
    assert [a.op for a in summary.allocations] == ["aten.empty.memory_format", "aten.mul.Tensor"]
    assert buffer.numel() + doubled.numel() == 150


def test_views_in_place_ops_and_out_arguments_allocate_nothing() -> None:
    x, out = torch.randn(100), torch.empty(200)
    with AllocationTracker("cpu") as tracker:
        x.view(10, 10).t()[:3].mul_(2)
        x.add_(1)
        torch.cat([x, x], out=out)
        _ = x.data
    assert tracker.summary().count == 0
    assert tracker.summary().peak_bytes == 0


def test_the_peak_counts_only_storages_still_alive() -> None:
    with AllocationTracker("cpu") as tracker:
        for _ in range(5):
            buffer = torch.empty(1000)
            del buffer
    summary = tracker.summary()
    assert (summary.count, summary.total_bytes, summary.peak_bytes) == (5, 20_000, 4000)


def test_a_view_keeps_its_storage_alive() -> None:
    with AllocationTracker("cpu") as tracker:
        first = torch.empty(1000)
        view = first[:10]
        del first
        second = torch.empty(1000)
    assert tracker.summary().peak_bytes == 8000
    assert view.numel() + second.numel() == 1010


def test_flattening_everything_holds_it_all_and_a_staging_buffer_one_chunk(one_rank_group: None) -> None:
    """Upstream's single buffer against a chunked all-reduce that reuses one staging buffer, collectives included."""
    population = grads()
    with AllocationTracker("cpu") as upstream:
        flat = _flatten_dense_tensors(population)
        dist.all_reduce(flat)
        for buf, synced in zip(population, _unflatten_dense_tensors(flat, population), strict=True):
            buf.copy_(synced)
    assert upstream.summary().peak_bytes == upstream.summary().largest_bytes == 8 * 4000
    with AllocationTracker("cpu") as chunked:
        staging = torch.empty(2000)
        for start in range(0, 8, 2):
            torch.cat(population[start : start + 2], out=staging)
            dist.all_reduce(staging, async_op=True).wait()
    assert chunked.summary().peak_bytes == 8000
    assert chunked.summary().count == 1


def test_a_storage_grown_in_place_is_a_new_allocation() -> None:
    buffer = torch.empty(0)
    with AllocationTracker("cpu") as tracker:
        buffer.resize_(1000)
    assert tracker.summary().peak_bytes == 4000


def test_allocations_on_other_devices_are_listed() -> None:
    summary = AllocationSummary(
        allocations=[Allocation("aten.empty.memory_format", 64, "cpu"), Allocation("aten.cat.default", 8, "cuda:0")]
    )
    assert summary.on_other_devices("cpu") == [summary.allocations[1]]
    assert summary.on_other_devices(torch.device("cuda", 0)) == [summary.allocations[0]]


def test_every_cpu_tensor_is_on_the_grads_device() -> None:
    with AllocationTracker("cpu") as tracker:
        torch.zeros(3)
        torch.ones(3, dtype=torch.bfloat16)
    assert tracker.summary().on_other_devices("cpu") == []


def _report(peak: int, allocations: list[Allocation], ops: tuple[str, ...] = ("SUM",)) -> rank_report.RankReport:
    report = rank_report.RankReport(rank=1, upstream_collectives=[(op, 0, 4) for op in ops])
    report.allocations = AllocationSummary(
        peak_bytes=peak,
        largest_bytes=max((a.nbytes for a in allocations), default=0),
        count=len(allocations),
        total_bytes=sum(a.nbytes for a in allocations),
        allocations=allocations,
    )
    return report


def test_the_memory_bound_is_a_constant_number_of_chunks() -> None:
    chunks = allocations.MEMORY_BOUND_CHUNKS
    assert allocations.memory_bound(100, 48, 4, 4) == (100, 100 * chunks)
    assert allocations.memory_bound(48, 100, 4, 4) == (100, 100 * chunks)
    # bf16 with fp16 promotes to fp32: twice the smallest element.
    assert allocations.memory_bound(10, 74, 4, 2) == (148, 148 * chunks)


def test_a_subject_over_the_bound_is_named_with_the_bytes_it_held() -> None:
    report = _report(4096, [Allocation("aten.cat.default", 4096, "cpu")])
    rank_report.check_memory(report, 256, 64, 4, 4, torch.device("cpu"))
    assert report.problems == [
        "rank 1: the subject held 4096 bytes of tensors it allocated at once (largest 4096, 1 allocations of 4096 "
        "bytes in all) > 2048 bytes = 8 x max(budget 256, largest grad 64) x dtype promotion 4/4 (256): its memory "
        "grows with the grads, not with the budget"
    ]


def test_a_fresh_buffer_per_chunk_design_meets_the_bound_with_room() -> None:
    """The chunk being reduced, the previous one still bound to a loop variable, one a backend drops late, for each
    of two ops: six chunks at worst, under the bound however the timing falls."""
    held = 6 * 256
    report = _report(held, [Allocation("aten.empty.memory_format", 256, "cpu")] * 6, ops=("SUM", "AVG"))
    rank_report.check_memory(report, 256, 64, 4, 4, torch.device("cpu"))
    assert report.problems == []
    assert report.memory_bound_bytes == 8 * 256
    over = _report(8 * 256 + 1, [Allocation("aten.empty.memory_format", 8 * 256 + 1, "cpu")], ops=("SUM", "AVG"))
    rank_report.check_memory(over, 256, 64, 4, 4, torch.device("cpu"))
    assert len(over.problems) == 1


def test_a_buffer_on_another_device_than_the_grads_is_named() -> None:
    report = _report(64, [Allocation("aten.empty.memory_format", 64, "cpu")])
    rank_report.check_memory(report, 256, 64, 4, 4, torch.device("cuda", 0))
    assert report.problems == [
        "rank 1: the subject created a cpu buffer for cuda grads (aten.empty.memory_format, 64 bytes)"
    ]


@pytest.mark.parametrize(
    ("nbytes", "block"),
    [(0, 0), (1, 512), (40, 512), (511, 512), (512, 512), (513, 1024), (4000, 4096), (1 << 20, 1 << 20)],
)
def test_a_cuda_block_is_the_request_rounded_up_to_512_bytes(nbytes: int, block: int) -> None:
    assert block_bytes(nbytes) == block


def test_a_large_block_may_count_up_to_one_mib_more_for_its_unsplit_remainder() -> None:
    assert allocated_bytes_at_most(40) == 512
    assert allocated_bytes_at_most(1 << 20) == 1 << 20
    assert allocated_bytes_at_most((1 << 20) + 1) == (1 << 20) + 512 + (1 << 20)


def test_reserved_segments_come_in_two_pools() -> None:
    assert segment_bytes(40) == segment_bytes(1 << 20) == 2 << 20
    assert segment_bytes((1 << 20) + 1) == segment_bytes((10 << 20) - 1) == 20 << 20
    assert segment_bytes((10 << 20) + 1) == 12 << 20
    assert segment_bytes(0) == 0


def test_under_the_cuda_allocator_each_storage_counts_as_its_block() -> None:
    """CPU tensors counted as the caching allocator would count them on a GPU: a 40-byte buffer holds 512."""
    with AllocationTracker("cpu", allocator="cuda") as tracker:
        staging = torch.empty(10)
        chunk = torch.empty(1000)
    summary = tracker.summary()
    assert (summary.peak_bytes, summary.largest_bytes, summary.total_bytes) == (512 + 4096, 4096, 512 + 4096)
    assert [a.nbytes for a in summary.allocations] == [512, 4096]
    assert summary.allocator == "cuda"
    assert staging.numel() + chunk.numel() == 1010


def test_an_unknown_allocator_is_refused() -> None:
    with pytest.raises(ValueError, match="allocator must be one of"):
        AllocationTracker("cpu", allocator="pinned")


def test_the_cuda_bound_counts_chunks_as_allocator_blocks() -> None:
    """A 40-byte chunk: 80 bytes would be the bound in raw bytes, which one 512-byte block already exceeds; in blocks
    the bound is eight blocks."""
    chunks = allocations.MEMORY_BOUND_CHUNKS
    assert allocations.memory_bound(40, 8, 4, 4) == (40, 40 * chunks)
    assert allocations.memory_bound(40, 8, 4, 4, "cuda") == (512, 512 * chunks)
    large = (4 << 20) + 4
    assert allocations.memory_bound(large, 8, 4, 4, "cuda") == (
        allocated_bytes_at_most(large),
        chunks * (block_bytes(large) + cuda_allocator.SMALL_REQUEST_BYTES),
    )


def _staged_and_flattened(group_grads: list[torch.Tensor], budget: int, allocator: str) -> tuple[int, int, int]:
    """Peak of a staging-buffer design (one budget-sized buffer reused), of upstream's flattening, and the bound."""
    with AllocationTracker("cpu", allocator=allocator) as staged:
        staging = torch.empty(budget // 4)
        for start in range(0, len(group_grads), budget // 40):
            chunk = group_grads[start : start + budget // 40]
            torch.cat(chunk, out=staging[: sum(g.numel() for g in chunk)])
            dist.all_reduce(staging)
    with AllocationTracker("cpu", allocator=allocator) as flattened:
        flat = _flatten_dense_tensors(group_grads)
        dist.all_reduce(flat)
    _, bound = allocations.memory_bound(budget, 40, 4, 4, allocator)
    return staged.summary().peak_bytes, flattened.summary().peak_bytes, bound


def test_a_staging_buffer_of_tiny_grads_is_within_the_cuda_bound_and_flattening_is_not(one_rank_group: None) -> None:
    """Grads of 10 elements under a 40-byte budget: in raw bytes the staging design fits (40 <= 320); counted as CUDA
    blocks it would not fit a raw-byte bound (512 > 320) but fits the block bound (512 <= 4096); flattening 512 such
    grads (20 KiB) exceeds both."""
    group_grads = grads(count=512, numel=10)
    staged, flattened, bound = _staged_and_flattened(group_grads, 40, "host")
    assert (staged, bound) == (40, 320) and flattened == 20480 > bound
    staged, flattened, bound = _staged_and_flattened(group_grads, 40, "cuda")
    assert staged == 512 > allocations.memory_bound(40, 40, 4, 4)[1]
    assert bound == 4096 and staged <= bound < flattened == 20480


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_allocator_peak_is_taken_too() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    with AllocationTracker(device) as tracker:
        torch.empty(1000, device=device)
        torch.empty(10, device="cpu")
    summary = tracker.summary()
    assert summary.cuda_peak_bytes is not None and summary.cuda_peak_bytes >= 4096
    assert summary.cuda_reserved_peak_bytes is not None and summary.allocator == "cuda"
    assert [a.device for a in summary.on_other_devices(device)] == ["cpu"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("nbytes", [1, 40, 512, 513, 4000, 1 << 20, (3 << 20) + 1])
def test_the_block_rules_are_the_allocators_own(nbytes: int) -> None:
    """On a GPU, ``memory_allocated`` grows by the modelled block for a fresh request (never by more than the
    modelled bound), and the tracker's count agrees."""
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    with AllocationTracker(device) as tracker:
        buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
        grown = torch.cuda.memory_allocated(device) - before
    assert block_bytes(nbytes) <= grown <= allocated_bytes_at_most(nbytes)
    assert tracker.summary().tracked_peak_bytes == block_bytes(nbytes)
    del buffer
