"""Seeded break: within each chunk the params are rotated by one against their grads."""

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split


def split_into_chunks(params, grads, budget_bytes):
    return [(p[1:] + p[:1], g) for p, g in _reference_split(params, grads, budget_bytes)]
