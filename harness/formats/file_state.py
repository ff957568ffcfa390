"""A digest of the files below a folder, read from their names, sizes and modification times, never their bytes.

What a venv was built from (a framework's folder) and what verdicts were read from (a framework's and Megatron's
source) are told apart by it: a file edited since gives another digest. Version control, caches, build output, venvs
and reports are not the source and are never walked.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

NOT_SOURCE = (".git", "__pycache__", ".nox", ".venv", "venv", "build", "dist", ".tox", "reports", ".hypothesis")
"""Folders below a source root that hold no source (``*.egg-info`` too)."""


def files_state(root: Path, suffix: str = "") -> str:
    """The digest of the files below ``root`` whose names end in ``suffix`` (all of them by default), by their path
    relative to ``root``, size and modification time."""
    digest = hashlib.sha256()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in NOT_SOURCE and not d.endswith(".egg-info"))
        for name in sorted(f for f in files if f.endswith(suffix)):
            path = Path(directory, name)
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
