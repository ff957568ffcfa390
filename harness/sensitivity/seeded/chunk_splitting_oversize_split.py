"""Seeded break: a grad larger than the budget is cut into budget-sized views."""

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split


def split_into_chunks(params, grads, budget_bytes):
    out_p, out_g = [], []
    for p, g in zip(params, grads):
        per = max(1, budget_bytes // max(g.element_size(), 1))
        if g.numel() * g.element_size() > budget_bytes and g.is_contiguous():
            flat = g.view(-1)
            for start in range(0, flat.numel(), per):
                out_p.append(p)
                out_g.append(flat[start : start + per])
        else:
            out_p.append(p)
            out_g.append(g)
    return _reference_split(out_p, out_g, budget_bytes)
