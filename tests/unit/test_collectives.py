"""The collective recorder sees every path to an all-reduce, on a real one-rank gloo group in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import all_reduce as bound_at_import

from harness.contracts.collectives import CollectiveRecorder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if dist.is_initialized():
        pytest.fail("torch.distributed is already initialised in this process")
    store = dist.FileStore(str(Path(tmp_path_factory.mktemp("store")) / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _functional(tensor: torch.Tensor) -> None:
    import torch.distributed._functional_collectives as functional

    result = functional.all_reduce(tensor, "avg", dist.group.WORLD)
    if hasattr(result, "wait"):
        result.wait()


PATHS = {
    "attribute": lambda t: dist.all_reduce(t),
    "bound at import": lambda t: bound_at_import(t, op=dist.ReduceOp.MAX),
    "async handle": lambda t: dist.all_reduce(t, async_op=True).wait(),
    "coalesced": lambda t: dist.all_reduce_coalesced([t, t.clone()]),
    "process group method": lambda t: dist.group.WORLD.allreduce([t]).wait(),
    "functional": _functional,
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_path_to_an_all_reduce_is_recorded(world: None, path: str) -> None:
    tensor = torch.ones(6)
    with CollectiveRecorder(dist.group.WORLD) as recorder:
        PATHS[path](tensor)
    assert len(recorder.calls) == 1, recorder.calls
    op, size, element = recorder.calls[0]
    expected_op = {"bound at import": "MAX", "functional": "AVG"}.get(path, "SUM")
    assert (op, element) == (expected_op, 4)
    assert size == (48 if path == "coalesced" else 24)
    assert recorder.foreign_groups == 0


def test_a_name_rebound_after_import_is_seen_too(world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A subject that swaps ``torch.distributed.all_reduce`` for a summing wrapper is recorded with the op that ran."""
    real = dist.all_reduce
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None, group=None, async_op=False: real(t, group=group))
    with CollectiveRecorder(dist.group.WORLD) as recorder:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG)
    assert [op for op, _, _ in recorder.calls] == ["SUM"]


def test_an_all_reduce_on_another_group_is_counted(world: None) -> None:
    other = dist.new_group([0])
    with CollectiveRecorder(dist.group.WORLD) as recorder:
        dist.all_reduce(torch.ones(3), group=other)
        dist.all_reduce(torch.ones(3))
    assert recorder.foreign_groups == 1
    assert len(recorder.calls) == 2


def test_nothing_that_is_no_all_reduce_is_recorded(world: None) -> None:
    with CollectiveRecorder(dist.group.WORLD) as recorder:
        dist.broadcast(torch.ones(3), src=0)
        torch.ones(3).add_(1)
    assert recorder.calls == []
