"""Correct variant: the chunks come out in reverse order. Every grad is still reduced exactly once, into its own
param's grad, so no value a rank computes changes: order is an advisory, never a red."""

from harness.reference import *  # noqa: F403
from harness.reference import split_into_chunks as _reference_split

STRICT = False


def split_into_chunks(params, grads, budget_bytes):
    return list(reversed(_reference_split(params, grads, budget_bytes)))
