"""One digest of the reader's code, so that what was cached from a reading (verdicts, fingerprints that name call
chains) is read again after the reader changes, and never before."""

from __future__ import annotations

import hashlib
from pathlib import Path


def files_digest(folder: Path) -> str:
    """Digest of every ``.py`` file directly under ``folder``, in sorted order (name and bytes)."""
    digest = hashlib.sha256()
    for file in sorted(folder.glob("*.py")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:12]


READER_DIGEST = files_digest(Path(__file__).resolve().parent)
"""The digest of ``harness/source/``."""
