"""The installed source of a megatron-core release other than the target's: what a framework's copy was taken from.

A declaration that says a replacement is a copy of upstream's function as of ``0.13.1`` (``copied_from``) asks what
upstream changed since. That needs the source of 0.13.1 beside the target's own. It is read, in this order, from:

1. a target venv beside the running one (``.nox/<session>``) that has that release installed: nothing to fetch;
2. the release's wheel, unpacked once into the cache (``$MEGATRON_CONFORMANCE_CACHE``, else
   ``$XDG_CACHE_HOME/megatron-conformance``, else ``~/.cache/megatron-conformance``) by ``uv pip install --target``
   from the indexes and find-links pip is configured with, the ones the target venvs are built from. Only a wheel is
   taken (``--no-build``): nothing is compiled, and the wheel's own dependencies are not installed.

Only ``.py`` files are read, so a wheel built for another Python serves as well as one for the target's: when none
fits the running interpreter, the Pythons of :data:`_OTHER_PYTHONS` are tried.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.targets.matrix import MEGATRON_DISTRIBUTION
from harness.targets.uv_lookup import find_uv
from harness.targets.venv_install import index_options, pip_settings

_OTHER_PYTHONS = ("3.12", "3.11", "3.10")
_FETCH_TIMEOUT_S = 300


class ReleaseSourceError(RuntimeError):
    """The release's source could not be had; the message says where it was looked for and what the fetch said."""


@dataclass(frozen=True)
class ReleaseSource:
    """Where a release's ``megatron`` package lies (``root`` holds ``megatron/``) and how it got there."""

    version: str
    root: Path
    origin: str


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """The folder wheels of other releases are unpacked into."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("MEGATRON_CONFORMANCE_CACHE"):
        return Path(environ["MEGATRON_CONFORMANCE_CACHE"])
    base = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "megatron-conformance"


def release_source(version: str, venvs: Path | None = None, cache: Path | None = None) -> ReleaseSource:
    """The source of megatron-core ``version``: from a venv under ``venvs`` (default: the folder of the running
    venv), else the cache, else fetched into the cache. :class:`ReleaseSourceError` when none of them has it."""
    venvs = Path(sys.prefix).parent if venvs is None else venvs
    cache = cache_dir() if cache is None else cache
    for site_packages in sorted(venvs.glob("*/lib/python3*/site-packages")):
        if (site_packages / _dist_info(version)).is_dir() and (site_packages / "megatron").is_dir():
            return ReleaseSource(version, site_packages, f"the target venv {site_packages.parents[2]}")
    unpacked = cache / f"{MEGATRON_DISTRIBUTION}-{version}"
    if not (unpacked / "megatron").is_dir():
        _fetch(version, unpacked)
        return ReleaseSource(version, unpacked, f"its wheel, fetched from the package index into {unpacked}")
    return ReleaseSource(version, unpacked, f"its wheel, cached in {unpacked}")


def _dist_info(version: str) -> str:
    return f"{MEGATRON_DISTRIBUTION.replace('-', '_')}-{version}.dist-info"


def distribution_source(name: str, version: str, package: str | None = None, cache: Path | None = None) -> Path:
    """The folder holding the published ``name==version``'s packages (``package`` among them, where the caller
    knows one), its wheel unpacked once into the cache without its dependencies: a framework's source, read without
    installing or importing it. Which packages it holds is :func:`top_level_packages`' answer."""
    cache = cache_dir() if cache is None else cache
    unpacked = cache / "distributions" / f"{name}-{version}"
    if not _unpacked(unpacked, package):
        _fetch(version, unpacked, name, package)
    return unpacked


def top_level_packages(distribution: importlib.metadata.Distribution) -> list[str]:
    """The top-level packages and modules a distribution installs: its ``top_level.txt``, else the first part of
    each file its ``RECORD`` lists (not its metadata, scripts or data)."""
    listed = (distribution.read_text("top_level.txt") or "").split()
    if listed:
        return sorted(set(listed))
    names = set()
    for file in distribution.files or ():
        head = file.parts[0]
        if head in ("..", "__pycache__") or head.endswith((".dist-info", ".data", ".egg-info")):
            continue
        if len(file.parts) > 1:
            names.add(head)
        elif head.endswith(".py"):
            names.add(head.removesuffix(".py"))
    return sorted(names)


def _unpacked(folder: Path, package: str | None) -> bool:
    """Whether a fetch left ``folder`` whole: the package asked for, else the distribution's metadata."""
    return (folder / package).is_dir() if package else any(folder.glob("*.dist-info/RECORD"))


def _fetch(
    version: str, destination: Path, name: str = MEGATRON_DISTRIBUTION, package: str | None = "megatron"
) -> None:
    """Unpack the wheel of ``name==version`` into ``destination`` through a scratch folder, so that an interrupted
    fetch never leaves a half-filled cache entry behind."""
    uv = find_uv()
    if uv is None:
        raise ReleaseSourceError(
            f"{name} {version}: no target venv beside this one has it, and uv, which fetches its "
            "wheel, is neither installed beside this interpreter nor on PATH (pip install uv, or build a target venv "
            "of that release)"
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    requirement = f"{name}=={version}"
    said = []
    for python in (None, *_OTHER_PYTHONS):
        scratch_dir = tempfile.TemporaryDirectory(
            dir=destination.parent, prefix=f".{destination.name}.", ignore_cleanup_errors=True
        )
        with scratch_dir as scratch:
            command = [uv, "pip", "install", "-q", "--no-deps", "--no-build", "--target", scratch]
            command += ["--python", sys.executable, *(["--python-version", python] if python else [])]
            command += [*index_options(pip_settings()), requirement]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=_FETCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise ReleaseSourceError(
                    f"{name} {version}: fetching its wheel took over {_FETCH_TIMEOUT_S} s"
                ) from None
            if done.returncode == 0 and _unpacked(Path(scratch), package):
                try:
                    os.replace(scratch, destination)
                except OSError:
                    if not _unpacked(destination, package):
                        raise
                return
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            said.append(f"for Python {python or 'of this venv'}: {last}")
    looked = "no target venv beside this one has it, and " if name == MEGATRON_DISTRIBUTION else ""
    raise ReleaseSourceError(f"{name} {version}: {looked}no wheel of it could be fetched ({'; '.join(said)})")
