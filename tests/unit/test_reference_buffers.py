"""The reference subject's buffers: they follow the grads' device (without a GPU the ``meta`` device stands in for
CUDA: a buffer made without a device would land on the CPU, which is what NCCL rejects), and none is made for grads
that tile one region of a grad buffer, which are reduced through one view of it."""

from __future__ import annotations

import pytest
import torch

from harness.reference.allreduce import _in_place_target, _staging_buffer


def test_the_staging_buffer_is_made_on_the_grads_device() -> None:
    grads = [torch.empty(3, 4, device="meta").t(), torch.empty(5, device="meta")]
    buffer = _staging_buffer([([None, None], grads)], [None], torch.float32)
    assert buffer.device == torch.device("meta")
    assert buffer.numel() == 17


def _buffer_views(sizes: list[int], reverse: bool = False) -> list[torch.Tensor]:
    """Views of one buffer, side by side, in the order given or the reverse, as Megatron's grad buffer holds them."""
    buffer = torch.zeros(sum(sizes))
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    views = [buffer[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
    return views[::-1] if reverse else views


@pytest.mark.parametrize("reverse", [False, True])
def test_grads_side_by_side_in_one_buffer_are_reduced_through_one_view(reverse: bool) -> None:
    grads = _buffer_views([3, 0, 5, 2], reverse)
    target = _in_place_target(grads, torch.float32)
    assert target is not None and target.numel() == 10
    assert target.data_ptr() == min(g.data_ptr() for g in grads if g.numel())


def test_grads_with_a_gap_between_them_are_staged() -> None:
    first, _, last = _buffer_views([3, 4, 5])
    assert _in_place_target([first, last], torch.float32) is None


@pytest.mark.parametrize(
    "grads",
    [
        [torch.zeros(3), torch.zeros(5)],
        [torch.zeros(8)[:3].to(torch.float16), torch.zeros(8)[3:].to(torch.float16)],
        [torch.zeros(8)[:4], torch.zeros(8)[2:6]],
    ],
    ids=["separate-storages", "other-dtype", "overlapping"],
)
def test_grads_that_do_not_tile_one_region_are_staged(grads: list[torch.Tensor]) -> None:
    assert _in_place_target(grads, torch.float32) is None


def test_grads_of_two_storages_side_by_side_in_memory_are_staged() -> None:
    """Adjacent addresses are not enough: one flat view can only reach memory of the first grad's own storage."""
    memory = bytearray(32)
    grads = [
        torch.frombuffer(memory, dtype=torch.float32, count=3),
        torch.frombuffer(memory, dtype=torch.float32, count=5, offset=12),
    ]
    assert grads[0].data_ptr() + 12 == grads[1].data_ptr()
    assert grads[0].untyped_storage().data_ptr() != grads[1].untyped_storage().data_ptr()
    assert _in_place_target(grads, torch.float32) is None


def test_a_staging_buffer_is_not_made_for_a_chunk_reduced_through_a_view() -> None:
    grads = _buffer_views([3, 5])
    chunks = [([None, None], grads)]
    targets = [_in_place_target(grads, torch.float32)]
    assert targets[0] is not None
    assert _staging_buffer(chunks, targets, torch.float32).numel() == 0


def test_a_chunk_of_one_grad_beside_empty_ones_is_reduced_where_it_lies() -> None:
    grad = torch.zeros(6)
    assert _in_place_target([torch.zeros(0), grad], torch.float32).data_ptr() == grad.data_ptr()
