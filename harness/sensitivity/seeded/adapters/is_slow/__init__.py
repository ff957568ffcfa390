"""Seeded adapter: its import takes half again as long as Megatron's own did in this process's fork server.

The break is the same size on any machine: the import-time case compares with that very figure. Where it is unknown
(a process the fork server did not make), the import costs nothing extra, so only that case sees the break.
"""

import sys
import time

_preload = sys.modules.get("harness.ranks.preload")
_megatron_ns = getattr(_preload, "MEGATRON_IMPORT_NS", None)
if _megatron_ns:
    time.sleep(1.5 * _megatron_ns / 1e9)
