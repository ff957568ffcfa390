"""Warnings of the fork server's imports and of every rank, written to files the session's warnings summary counts.

Megatron and torch warn hundreds of times at import; printed by every rank they would bury the reds. The session
names a directory (:data:`WARNINGS_ENV_VAR`) and each process appends one record a warning there.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

WARNINGS_ENV_VAR = "MEGATRON_CONFORMANCE_RANK_WARNINGS"
"""The directory where the fork server (``harness.ranks.preload``) and the ranks write the warnings the terminal counts
instead of printing them (set by ``harness.plugin.warnings_summary``; unset, warnings print as usual)."""


def warning_record(category: type[Warning], message: Warning | str, filename: str) -> str:
    """One line of a file in :data:`WARNINGS_ENV_VAR`'s directory: the warning's category, message and file, as the
    session's warnings summary reads them back."""
    return json.dumps([category.__name__, str(message), filename]) + "\n"


@contextlib.contextmanager
def warnings_to_file(path: Path) -> Iterator[None]:
    """The warnings shown while the block runs (an import's), written to ``path`` instead of stderr. ``showwarning``
    is swapped, not the filters: those torch and Megatron install at import stay in force, as in every other process
    of the session. A file that cannot be written loses nothing but this count."""
    caught: list[str] = []
    show = warnings.showwarning
    warnings.showwarning = lambda message, category, filename, *rest: caught.append(
        warning_record(category, message, filename)
    )
    try:
        yield
    finally:
        warnings.showwarning = show
        with contextlib.suppress(OSError), path.open("a") as out:
            out.writelines(caught)
