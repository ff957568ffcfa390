"""What ``megatron-conformance scan`` reads: the framework, and the Megatron source its symbols are named against.

The framework is a folder (its packages below it), a release on the package index (``verl==0.9.1``: its wheel
unpacked into the cache, never installed, :func:`~harness.targets.release_source.distribution_source`), or a
distribution installed in the running interpreter (``verl``): only that distribution's own top-level packages are
read, as its ``top_level.txt`` or ``RECORD`` lists them, never the rest of ``site-packages``.

Megatron's source is the built target venvs', else the installed megatron-core's, else every release of the matrix,
their wheels fetched once into the same cache: a newcomer scans before building anything, and a symbol some release
lacks is optional as with every target built.
"""

from __future__ import annotations

import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from harness import REPO_ROOT
from harness.targets.matrix import MEGATRON_DISTRIBUTION, load_matrix
from harness.targets.release_source import (
    ReleaseSource,
    ReleaseSourceError,
    distribution_source,
    release_source,
    top_level_packages,
)


class ScanSubjectError(ValueError):
    """What ``scan`` was given is not a framework it can read; the message is the one line it prints."""


@dataclass(frozen=True)
class ScanSubject:
    """A framework's source as the scan reads it."""

    root: Path
    """The folder holding its packages."""
    packages: tuple[str, ...] | None
    """Its top-level packages, for a distribution; ``None``: every package below ``root``."""
    distribution: str | None
    """``name==version`` of a published or installed release: what the declaration's ``[subject]`` names."""


def scan_subject(argument: str) -> ScanSubject:
    """The framework ``argument`` names: a folder, ``name==version`` on the package index, or the name of a
    distribution installed here."""
    if Path(argument).is_dir():
        return ScanSubject(Path(argument).resolve(), None, None)
    try:
        requirement = Requirement(argument)
    except InvalidRequirement:
        raise ScanSubjectError(_neither(argument)) from None
    pinned = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    if (requirement.specifier and len(pinned) != 1) or requirement.extras or requirement.url or requirement.marker:
        raise ScanSubjectError(f"{argument}: a release is named as NAME==VERSION (one exact version)")
    if pinned:
        try:
            root = distribution_source(requirement.name, pinned[0])
        except ReleaseSourceError as err:
            raise ScanSubjectError(str(err)) from None
        distribution = next(importlib.metadata.distributions(name=requirement.name, path=[str(root)]), None)
        version = pinned[0]
    else:
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise ScanSubjectError(_neither(argument)) from None
        root = Path(str(distribution.locate_file("")))
        version = distribution.version
    packages = [
        name
        for name in (top_level_packages(distribution) if distribution is not None else [])
        if (root / name).is_dir() or (root / f"{name}.py").is_file()
    ]
    if not packages:
        raise ScanSubjectError(f"{argument}: the distribution in {root} lists no package of Python source to read")
    return ScanSubject(root, tuple(packages), f"{requirement.name}=={version}")


def _neither(argument: str) -> str:
    return (
        f"{argument} is neither a folder nor a distribution installed in this interpreter ({sys.executable}); "
        "a release on the package index is NAME==VERSION"
    )


def matrix_releases(matrix: Path = REPO_ROOT / "matrix.yaml") -> list[str]:
    """The megatron-core releases the matrix pins from the package index, newest first."""
    pinned = [
        target.megatron.location.partition("==")[2]
        for target in load_matrix(matrix).targets
        if target.megatron.kind == "pypi" and target.megatron.location.startswith(f"{MEGATRON_DISTRIBUTION}==")
    ]
    if not pinned:
        raise ScanSubjectError(f"{matrix} pins no megatron-core release from the package index to name symbols against")
    return sorted(set(pinned), key=Version, reverse=True)


def matrix_release_sources(envdir: Path) -> list[ReleaseSource]:
    """Every matrix release's source, newest first, each from a venv under ``envdir``, else the cache, else its wheel
    fetched: a symbol some release lacks is then marked optional, as with every target built."""
    try:
        return [release_source(version, venvs=envdir) for version in matrix_releases()]
    except ReleaseSourceError as err:
        raise ScanSubjectError(f"no Megatron source to name symbols against: {err}") from None
