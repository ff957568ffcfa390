"""Each bisect step's verdict, kept per build, subject, case selection and gate code, so that a second bisect over
the same range reads its answers instead of building venvs again.

Kept under the cache (``$MEGATRON_CONFORMANCE_CACHE``, else ``~/.cache/megatron-conformance``) in ``bisect/``. The
key holds the build's version and file names, the subject's own files (the declaration and the ``.py`` files beside
it, by content), the cases asked for, and every ``.py`` file of the gate's ``harness/`` and ``cases/`` with the matrix
(by content): an edit of any of them is another key. A build that could not be run is not kept: the reason (a
network error, a full disk) may be gone next time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from harness import REPO_ROOT
from harness.bisect.search import SKIPPED, StepVerdict
from harness.targets.index_builds import Build
from harness.targets.release_source import cache_dir

_GATE_PARTS = ("harness", "cases")


def gate_digest(root: Path = REPO_ROOT) -> str:
    """The gate's code by content: ``harness/`` and ``cases/`` ``.py`` files, the matrix and the noxfile."""
    digest = hashlib.sha256()
    files = [p for part in _GATE_PARTS for p in sorted((root / part).rglob("*.py")) if "__pycache__" not in p.parts]
    for path in [*files, root / "matrix.yaml", root / "noxfile.py"]:
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def subject_digest(spec: str) -> str:
    """The subject by content: a declaration or ``.py`` file, with every ``.py`` file below its folder; a module
    name stands for itself (the reference subject is part of the gate's code)."""
    digest = hashlib.sha256(spec.encode())
    path = Path(spec)
    if path.is_file():
        digest.update(path.read_bytes())
        for source in sorted(path.resolve().parent.rglob("*.py")):
            if not {"__pycache__", ".nox", ".git", "reports"} & set(source.parts):
                digest.update(str(source).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def step_key(build: Build, subject: str, selection: Iterable[str], gate: str) -> str:
    parts = [build.version, *sorted(f.filename for f in build.files), subject, *sorted(selection), gate]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _path(key: str, cache: Path | None) -> Path:
    return (cache_dir() if cache is None else cache) / "bisect" / f"{key}.json"


def cached_step(key: str, cache: Path | None = None) -> StepVerdict | None:
    """The verdict kept under ``key``, marked as read from the cache; ``None`` when there is none."""
    path = _path(key, cache)
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        raw["red"] = tuple(raw.get("red", ()))
        return dataclasses.replace(StepVerdict(**raw), cached=True)
    except (OSError, ValueError, TypeError):
        return None


def keep_step(key: str, verdict: StepVerdict, cache: Path | None = None) -> None:
    """Keep ``verdict`` under ``key``, unless the build could not be run."""
    if verdict.status == SKIPPED:
        return
    path = _path(key, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as stream:
        json.dump(dataclasses.asdict(verdict), stream)
    os.replace(stream.name, path)
