"""The replaced symbols' verdicts read from source, kept per framework source, Megatron install and gate version.

Reading a framework of hundreds of modules and Megatron's source for each replaced symbol takes seconds that every
session on the same target would spend again on the same files. The verdicts (plain data) are written once under the
cache (``$MEGATRON_CONFORMANCE_CACHE``, else ``~/.cache/megatron-conformance``, ``verdicts/``), keyed by what decides
them: every framework ``.py`` file and every Megatron ``.py`` file (path, size, modification time), the releases
the framework's checks compare against, what the declaration names, and the reader's code. A change of any of them
is another key; nothing stale is read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.formats.file_state import files_state
from harness.source.reader_digest import READER_DIGEST
from harness.source.source_verdicts import SymbolVerdict
from harness.targets.release_source import cache_dir


def verdicts_key(root: Path, megatron_root: Path, releases: tuple[str, str], declared: Mapping[str, str]) -> str:
    """What the verdicts of the framework under ``root`` on the Megatron under ``megatron_root`` depend on."""
    parts = [
        READER_DIGEST,
        str(root),
        files_state(root, ".py"),
        str(megatron_root),
        files_state(megatron_root / "megatron", ".py"),
        *releases,
        json.dumps(sorted(declared.items())),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def cached_verdicts(
    key: str, compute: Callable[[], list[SymbolVerdict]], cache: Path | None = None
) -> list[SymbolVerdict]:
    """The verdicts kept under ``key``, else ``compute()``'s, kept for the next session."""
    folder = (cache_dir() if cache is None else cache) / "verdicts"
    path = folder / f"{key}.json"
    if path.is_file():
        try:
            return [SymbolVerdict(**entry) for entry in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):
            pass
    verdicts = compute()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as stream:
        json.dump([dataclasses.asdict(v) for v in verdicts], stream)
    os.replace(stream.name, path)
    return verdicts
