"""Seeded break: re-measures the whole open chunk for every grad, so cost grows with the square of chunk length."""

from harness.reference import *  # noqa: F403
from harness.reference.chunks import validate_budget


def split_into_chunks(params, grads, budget_bytes):
    validate_budget(budget_bytes)
    chunks, cur_p, cur_g = [], [], []
    for p, g in zip(params, grads):
        size = sum(t.numel() * t.element_size() for t in cur_g)
        if cur_g and size + g.numel() * g.element_size() > budget_bytes:
            chunks.append((cur_p, cur_g))
            cur_p, cur_g = [], []
        cur_p.append(p)
        cur_g.append(g)
    if cur_g:
        chunks.append((cur_p, cur_g))
    return chunks
