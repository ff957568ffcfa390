"""Seeded break: copies the open chunk and re-sums its sizes for every grad, with builtins. It makes a linear number
of Python calls (so a count of calls sees nothing wrong) while the work inside them, the slice summed and the lists
copied, grows with the square of the chunk's length."""

from harness.reference import *  # noqa: F403
from harness.reference.chunks import validate_budget


def split_into_chunks(params, grads, budget_bytes):
    validate_budget(budget_bytes)
    sizes = [g.numel() * g.element_size() for g in grads]
    chunks, cur_p, cur_g, start = [], [], [], 0
    for i, (p, g) in enumerate(zip(params, grads)):
        if cur_g and sum(sizes[start : i + 1]) > budget_bytes:
            chunks.append((cur_p, cur_g))
            cur_p, cur_g, start = [], [], i
        cur_p = [*cur_p, p]
        cur_g = [*cur_g, g]
    if cur_g:
        chunks.append((cur_p, cur_g))
    return chunks
