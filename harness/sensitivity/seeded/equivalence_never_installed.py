"""Seeded subject: install() only records the budget, so finalize_model_grads keeps calling upstream."""

from harness.reference import *  # noqa: F403


def install(budget_bytes=None):
    return None


def uninstall():
    return None
