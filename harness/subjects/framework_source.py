"""Where a declared framework's source lies, to be read without importing it (the replaced symbols read from source,
``scan``): its checkout, or, for a framework declared as published (``[subject] distribution``), the release's wheel
unpacked once into the cache, the same files the venv the cases run in holds and nothing else of site-packages.
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement

from harness.subjects.declaration import Declaration
from harness.targets.release_source import distribution_source


def framework_source_root(declaration: Declaration) -> Path:
    """The folder holding the framework's packages. Raises
    :class:`~harness.targets.release_source.ReleaseSourceError` where a published release cannot be fetched."""
    if declaration.distribution is None:
        return declaration.source_root
    requirement = Requirement(declaration.distribution)
    version = next(iter(requirement.specifier)).version
    package = declaration.adapter_package.partition(".")[0]
    return distribution_source(requirement.name, version, package)
