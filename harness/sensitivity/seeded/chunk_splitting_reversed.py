"""Seeded break: chunks come out in reverse order."""

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split


def split_into_chunks(params, grads, budget_bytes):
    return list(reversed(_reference_split(params, grads, budget_bytes)))
