"""Seeded break: a grad larger than the budget joins the chunk before it instead of going alone."""

from harness.reference import *  # noqa: F403


def split_into_chunks(params, grads, budget_bytes):
    if not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool) or budget_bytes <= 0:
        raise ValueError(budget_bytes)
    chunks, cur_p, cur_g, size = [], [], [], 0
    for p, g in zip(params, grads):
        n = g.numel() * g.element_size()
        if cur_g and size + n > budget_bytes and n <= budget_bytes:
            chunks.append((cur_p, cur_g))
            cur_p, cur_g, size = [], [], 0
        cur_p.append(p)
        cur_g.append(g)
        size += n
    if cur_g:
        chunks.append((cur_p, cur_g))
    return chunks
