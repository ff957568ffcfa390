"""The bench's own all-reduce variants, run beside upstream and the subject on the same grads.

- The floor: the collectives alone, no copy at all. Twice: every grad reduced where it lies, with as many reductions
  in flight as the reference subject keeps, and the whole population reduced as the one contiguous buffer the grads
  are views of. No variant that moves the same bytes through the same backend can beat the faster of the two by
  more than noise, so each variant's distance to it is what copying and coalescing cost.
- The field-style comparator: what a downstream chunked patch commonly does. Grads are packed greedily into chunks of
  at most the budget (a grad over it alone), and each chunk is flattened into a fresh buffer, reduced and copied
  back, one chunk after the other.

The bench's grads are all sequence-parallel fp32 ``main_grad``s, so every variant reduces all of them with SUM.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from harness.reference.allreduce import IN_PLACE_IN_FLIGHT

FLOOR_IN_PLACE = "floor in place"
FLOOR_FLAT = "floor flat"
FIELD_PREFIX = "field"


def floor_in_place(grads: list[torch.Tensor], group: Any) -> None:
    """Each grad reduced in place, ``IN_PLACE_IN_FLIGHT`` reductions in flight."""
    in_flight: list[Any] = []
    for grad in grads:
        in_flight.append(torch.distributed.all_reduce(grad, group=group, async_op=True))
        if len(in_flight) >= IN_PLACE_IN_FLIGHT:
            in_flight.pop(0).wait()
    for work in in_flight:
        work.wait()


def floor_flat(flat: torch.Tensor, group: Any) -> None:
    """The buffer the grads are views of, reduced in one collective."""
    torch.distributed.all_reduce(flat, group=group)


def field_style(grads: list[torch.Tensor], group: Any, budget_bytes: int) -> None:
    """Greedy chunks of at most ``budget_bytes``; per chunk a fresh flattened buffer, reduced, then copied back."""
    for chunk in _greedy_chunks(grads, budget_bytes):
        coalesced = _flatten_dense_tensors(chunk)
        torch.distributed.all_reduce(coalesced, group=group)
        for grad, synced in zip(chunk, _unflatten_dense_tensors(coalesced, chunk), strict=True):
            grad.copy_(synced)


def _greedy_chunks(grads: list[torch.Tensor], budget_bytes: int) -> list[list[torch.Tensor]]:
    chunks: list[list[torch.Tensor]] = []
    current: list[torch.Tensor] = []
    used = 0
    for grad in grads:
        size = grad.numel() * grad.element_size()
        if current and used + size > budget_bytes:
            chunks.append(current)
            current, used = [], 0
        current.append(grad)
        used += size
    if current:
        chunks.append(current)
    return chunks
