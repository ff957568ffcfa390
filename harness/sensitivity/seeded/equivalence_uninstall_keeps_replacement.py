"""Seeded subject: ``uninstall()`` does nothing, so the chunked all-reduce ``install()`` bound stays in upstream's place
after the first example; a gate that reads "upstream" from the module attribute then compares the subject with
itself for every later example."""

from harness.reference import *  # noqa: F403


def uninstall():
    return None
