"""What the fork server imports once, before it forks any rank, and how long its first ``import megatron.core`` took.

Ranks fork from the server (``harness.ranks.pool``), so whatever it imported costs a rank nothing. The server is a
fresh interpreter, and its ``import megatron.core`` (torch included, as Megatron imports it first) is the very import
the import-side-effects family's import-time case compares an adapter with: timed here, it needs no interpreter of its
own.

Importing this module anywhere else does no harm: where ``megatron.core`` was imported already, nothing is timed.
Megatron may be missing (the harness's own venv): the server then preloads what it can.

Its imports' warnings (Megatron's "Transformer Engine and Apex are not installed" and the like) are written to the
directory :data:`harness.ranks.rank_warnings.WARNINGS_ENV_VAR` names, where the session's warnings summary counts them
with every rank's, rather than to the server's stderr in the middle of the progress lines.

The server exits when the process that started it does; Python's teardown of torch's and Megatron's modules would
then take it 1-2 s more, holding the session's output pipe open (nox waits for it) for nothing. In the server only,
an exit function leaves at once. The ranks it forks never run exit functions: they leave with ``os._exit``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import time
from pathlib import Path

from harness.ranks.rank_warnings import WARNINGS_ENV_VAR, warnings_to_file
from harness.targets.megatron_names import FINALIZE_MODULE

RANK_MODULES = (
    "torch",
    "torch.distributed",
    FINALIZE_MODULE,
    "harness.ranks.megatron_state",
    "harness.ranks.pool",
)
"""What every rank imports before its first task. With the finalize module and megatron_state here, the upstream pin
each rank takes at start (``harness.ranks.pool._pin_upstream``) costs no import."""

MEGATRON_IMPORT_NS: int | None = None
"""Nanoseconds this process's first ``import megatron.core`` took; None where it was imported before this module,
or could not be."""


def _time_first_megatron_import() -> int | None:
    if "megatron.core" in sys.modules:
        return None
    started = time.perf_counter_ns()
    try:
        importlib.import_module("megatron.core")
    except ImportError:
        return None
    return time.perf_counter_ns() - started


def _preloaded_by_the_fork_server() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main``, i.e. in the fork server itself."""
    server = sys.modules.get("multiprocessing.forkserver")
    frame = sys._getframe()
    while server is not None and frame is not None:
        if frame.f_code is server.main.__code__:
            return True
        frame = frame.f_back
    return False


def _preload() -> None:
    global MEGATRON_IMPORT_NS
    MEGATRON_IMPORT_NS = _time_first_megatron_import()
    for name in RANK_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


_directory = os.environ.get(WARNINGS_ENV_VAR)
if _preloaded_by_the_fork_server():
    atexit.register(os._exit, 0)
if _directory and _preloaded_by_the_fork_server():
    # Only torch, Megatron and the harness's rank modules are imported here; the summary names any warning that is
    # not an installed package's by its file.
    with warnings_to_file(Path(_directory) / f"forkserver-{os.getpid()}.jsonl"):
        _preload()
else:
    _preload()
