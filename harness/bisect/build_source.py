"""The ``megatron`` source of one build on the index, unpacked once into the cache for the bisect's diff.

A step's venv is rebuilt for the next build, so the source of the last green and first red builds is read from
their files on the index instead: the source distribution where there is one (the smallest), else any wheel (only
``.py`` files are kept, and those are the same in every platform's wheel). Nothing is built or installed.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from harness.targets.index_builds import Build, BuildFile
from harness.targets.release_source import cache_dir

_TIMEOUT_S = 300


class BuildSourceError(RuntimeError):
    """The build's source could not be fetched or unpacked; the message names the file and the reason."""


def build_source(build: Build, cache: Path | None = None) -> Path:
    """The folder holding the build's ``megatron/`` package."""
    root = (cache_dir() if cache is None else cache) / "builds" / build.version
    if (root / "megatron").is_dir():
        return root
    file = _file_to_read(build)
    try:
        with urllib.request.urlopen(file.url, timeout=_TIMEOUT_S) as response:
            payload = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise BuildSourceError(f"{file.filename} could not be fetched from {file.url}: {err}") from None
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _unpack(file, payload, partial)
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise BuildSourceError(f"{file.filename} could not be unpacked: {err}") from None
    if not (partial / "megatron").is_dir():
        shutil.rmtree(partial, ignore_errors=True)
        raise BuildSourceError(f"{file.filename} holds no megatron/ package")
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root


def _file_to_read(build: Build) -> BuildFile:
    sources = [f for f in build.files if not f.is_wheel]
    if sources:
        return sources[0]
    if not build.files:
        raise BuildSourceError(f"megatron-core {build.version} has no file on the index")
    return build.files[0]


def _unpack(file: BuildFile, payload: bytes, destination: Path) -> None:
    """Every ``megatron/**.py`` member of the archive, written below ``destination`` (the sdist's top folder
    dropped); members that would land outside it are refused."""
    members: list[tuple[str, bytes]] = []
    if file.is_wheel or file.filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            members = [(n, archive.read(n)) for n in archive.namelist() if n.endswith(".py")]
    else:
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
            for member in archive.getmembers():
                extracted = archive.extractfile(member) if member.isfile() and member.name.endswith(".py") else None
                if extracted is not None:
                    members.append(
                        (member.name.split("/", 1)[1] if "/" in member.name else member.name, extracted.read())
                    )
    for name, data in members:
        if not name.startswith("megatron/") or ".." in Path(name).parts:
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
