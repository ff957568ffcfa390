"""The import-side-effects family's import-time measure: an adapter's import on top of an imported Megatron, next to
Megatron's.

Both come from fresh interpreters without one of their own: Megatron's is the fork server's first ``import
megatron.core`` (:mod:`harness.ranks.preload`, torch included), the adapter's is timed in a one-rank pool forked from
that server, so with torch, Megatron and the finalize module already imported and nothing of the session's own
(the subject loaded by the cases, their patches) in it. The pool is closed afterwards: the adapter stays imported in
no process a later case uses.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.ranks.pool import RankPool


@dataclass(frozen=True)
class ImportTimes:
    """Microseconds of ``import megatron.core`` in a fresh interpreter, and of the adapter's import after it."""

    megatron_core_us: int
    adapter_us: int

    @property
    def ratio(self) -> float:
        return self.adapter_us / self.megatron_core_us


class ImportTimeError(RuntimeError):
    """The measure could not be taken; the message says why."""


def adapter_import_task(rank: int, world_size: int, root: str, name: str) -> tuple[int | None, int]:
    """In a rank: the server's Megatron import time (ns, None where it was not timed) and this import of ``name``."""
    from harness.ranks import preload

    sys.path.insert(0, root)
    started = time.perf_counter_ns()
    importlib.import_module(name)
    return preload.MEGATRON_IMPORT_NS, time.perf_counter_ns() - started


def measure_import_times(root: Path, name: str) -> ImportTimes:
    """Time the import of ``name`` (found under ``root``) in a fresh rank, next to Megatron's own import time."""
    pool = RankPool(1)
    try:
        megatron_ns, adapter_ns = pool.run(adapter_import_task, str(root), name)[0]
    finally:
        pool.close()
    if megatron_ns is None:
        raise ImportTimeError("megatron.core was not imported fresh by the fork server, so its import was not timed")
    return ImportTimes(megatron_ns // 1000, adapter_ns // 1000)
