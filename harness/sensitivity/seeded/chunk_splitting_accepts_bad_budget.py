"""Seeded break: a non-positive budget silently means one chunk per tensor instead of an error."""

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split


def split_into_chunks(params, grads, budget_bytes):
    return _reference_split(params, grads, budget_bytes if isinstance(budget_bytes, int) and budget_bytes > 0 else 1)
