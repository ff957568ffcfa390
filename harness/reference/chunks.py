"""Greedy, order-preserving split of (param, grad) pairs into chunks of bounded byte size.

The upstream all-reduce coalesces every selected grad into one buffer; on very large models that single allocation
fails. Splitting into chunks of at most ``budget_bytes`` bounds the largest buffer while keeping the number of
collectives as small as the budget allows (greedy packing), which is why a tensor larger than the budget is sent alone
rather than split: a flat buffer cannot hold part of a tensor without a copy of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

P = TypeVar("P")


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes the tensor occupies once flattened into a coalesced buffer."""
    return tensor.numel() * tensor.element_size()


def validate_budget(budget_bytes: object) -> int:
    """Return the budget as an int, or raise ``ValueError`` for anything but a positive integer."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise ValueError(f"budget_bytes must be a positive integer number of bytes, got {budget_bytes!r}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    return budget_bytes


def split_into_chunks(
    params: Sequence[P], grads: Sequence[torch.Tensor], budget_bytes: int
) -> list[tuple[list[P], list[torch.Tensor]]]:
    """Split aligned ``params``/``grads`` into consecutive chunks whose grads fit ``budget_bytes``.

    A chunk closes as soon as the next grad would push it over the budget; a grad larger than the budget forms a
    chunk of its own. Concatenating the chunks gives back the inputs, in order, with no empty chunk.
    """
    budget = validate_budget(budget_bytes)
    if len(params) != len(grads):
        raise ValueError(f"params and grads differ in length: {len(params)} != {len(grads)}")
    chunks: list[tuple[list[P], list[torch.Tensor]]] = []
    chunk_params: list[P] = []
    chunk_grads: list[torch.Tensor] = []
    chunk_bytes = 0
    for param, grad in zip(params, grads, strict=True):
        size = tensor_bytes(grad)
        if chunk_grads and chunk_bytes + size > budget:
            chunks.append((chunk_params, chunk_grads))
            chunk_params, chunk_grads, chunk_bytes = [], [], 0
        chunk_params.append(param)
        chunk_grads.append(grad)
        chunk_bytes += size
    if chunk_grads:
        chunks.append((chunk_params, chunk_grads))
    return chunks
