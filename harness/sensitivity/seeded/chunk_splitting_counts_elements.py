"""Seeded break: sizes counted in elements, not bytes, so bf16/fp32 chunks overflow the budget."""

from harness.reference import *  # noqa: F403
from harness.reference.chunks import validate_budget


def split_into_chunks(params, grads, budget_bytes):
    validate_budget(budget_bytes)
    chunks, cur_p, cur_g, size = [], [], [], 0
    for p, g in zip(params, grads):
        n = g.numel()
        if cur_g and size + n > budget_bytes:
            chunks.append((cur_p, cur_g))
            cur_p, cur_g, size = [], [], 0
        cur_p.append(p)
        cur_g.append(g)
        size += n
    if cur_g:
        chunks.append((cur_p, cur_g))
    return chunks
