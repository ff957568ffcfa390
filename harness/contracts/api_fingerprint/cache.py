"""Fingerprints cached per installed Megatron.

``python -m harness.contracts.api_fingerprint`` (:mod:`harness.contracts.api_fingerprint.__main__`) writes the
fingerprint of a subject's declared symbols from inside a target venv, cached per installed Megatron under
``reports/.fingerprints/<session>-<key>.json`` (see :func:`_install_key`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from harness.contracts.api_fingerprint.inspection import fingerprint_symbols
from harness.source.reader_digest import READER_DIGEST, files_digest
from harness.targets.installed_versions import installed_versions, megatron_origin

_DISTRIBUTION = "megatron-core"


HARNESS_DIGEST = files_digest(Path(__file__).resolve().parent) + READER_DIGEST
"""Digest of this package's code and the reader's (the fingerprint names call chains the reader reads): a change of
how fingerprints are made invalidates the cached ones."""


def _install_key() -> str | None:
    """``<version>-<digest of the installed .py files>``; ``None`` when the distribution lists no Python files.

    The digest is over the files pip installed (from the distribution's RECORD), so an index install, a local
    wheel, a local tree or an edited site-packages of the same version never share a key.
    """
    try:
        dist = importlib.metadata.distribution(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    files = sorted((f for f in dist.files or [] if f.suffix == ".py"), key=str)
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file).encode() + b"\0" + Path(str(file.locate())).read_bytes())
    return f"{dist.version}-{digest.hexdigest()[:12]}"


def cached_fingerprint(symbols: list[str], session: str, cache_dir: Path) -> dict[str, Any]:
    """Fingerprints of ``symbols`` on the running interpreter's Megatron, read from or added to the cache.

    The cache file of an install holds every symbol fingerprinted there so far and the digest of this package's code
    (:data:`HARNESS_DIGEST`), so a change of how fingerprints are made invalidates it.
    """
    key = _install_key()
    path = cache_dir / f"{session}-{key}.json" if key else None
    known: dict[str, Any] = {}
    if path is not None and path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("harness") == HARNESS_DIGEST:
            known = stored["symbols"]
    missing = [s for s in symbols if s not in known]
    known.update(fingerprint_symbols(missing))
    record = {
        "session": session,
        "key": key,
        "harness": HARNESS_DIGEST,
        "megatron_core": installed_versions()[_DISTRIBUTION],
        "origin": megatron_origin(),
        "symbols": known,
    }
    if path is not None and missing:
        write_json(path, record)
    return {**record, "symbols": {s: known[s] for s in symbols}, "cached": not missing}


def write_json(path: Path, data: object) -> None:
    """Write atomically: two processes writing the same file never leave half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as stream:
        json.dump(data, stream, indent=2)
        stream.write("\n")
    os.replace(temporary, path)
