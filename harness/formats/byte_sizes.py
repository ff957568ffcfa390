"""Byte counts as the report and the findings write them: rounded for comparing, exact where a reader checks."""

from __future__ import annotations


def size(nbytes: int) -> str:
    """Bytes as a reader compares them across targets: ``896 B``, ``17.3 KiB``, ``4 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{round(nbytes / scale, 1):g} {unit}"
    return f"{nbytes} B"


def exact(nbytes: int) -> str:
    """``5,275,648 B (5 MiB)``: the exact figure a reader checks by hand, and the one they compare."""
    return f"{nbytes:,} B ({size(nbytes)})" if nbytes >= 1024 else f"{nbytes} B"
