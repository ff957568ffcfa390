"""A finished target session leaves without the interpreter's teardown.

Once every exit function has run (the rank pools are closed, the fork server's files removed, the reports written
long before), Python's own teardown of torch's and Megatron's modules still takes 1-2 s and does nothing for the gate.
The process then leaves with the session's exit status as soon as its output is flushed.

The exit function is registered when this plugin is imported, first of the case command's plugins
(:mod:`harness.plugin.command`) and before anything imports ``multiprocessing``: exit functions run last-registered
first, so every other one (the pools' ``close_all_pools``, multiprocessing's own) has run by the time it does; only
``logging``'s, registered earlier still, is called here. Only the process that ran the session does this, and only
once its ``pytest_sessionfinish`` has run; an xdist worker, or a run that never got that far, exits as Python does.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

import pytest

_finished: list[pytest.Session] = []
"""The session whose exit status the process leaves with; empty until it has finished in this process."""


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        _finished.append(session)


def _leave_without_teardown() -> None:
    if not _finished:
        return
    status = int(_finished[-1].exitstatus)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            # What pytest's own entry point answers when its output cannot be flushed.
            status = status or 1
    os._exit(status)


atexit.register(_leave_without_teardown)
