"""What a venv holds, read from its ``site-packages`` metadata without running its interpreter: each distribution's
version, requirements, top-level modules and files.

The install's later steps ask questions of this listing, not of ``uv pip list``: which distributions require torch
(the torch-coupled ones), which distribution owns the file an import raised in (the one to leave out), what a
distribution's modules are called (what the probe imports).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Distribution:
    """One installed distribution: its canonical name, version, requirements, and files relative to
    ``site-packages``."""

    name: str
    version: str
    requires: tuple[Requirement, ...]
    files: tuple[str, ...]
    top_level: tuple[str, ...]
    direct_url: str = ""
    """Where it was installed from, when not from an index (PEP 610's ``direct_url.json``: a folder, a file)."""

    def modules(self) -> tuple[str, ...]:
        """Its importable top-level modules: ``top_level.txt`` where it has one, else the folders and ``.py`` files
        at the top of its files (not its metadata, not private names)."""
        names = self.top_level or tuple(sorted({_top_module(f) for f in self.files} - {""}))
        return tuple(n for n in names if n.isidentifier() and not n.startswith("_"))


def _top_module(path: str) -> str:
    first, _, rest = path.partition("/")
    if first.endswith((".dist-info", ".data")) or first in {"..", "bin"}:
        return ""
    if rest:
        return first
    return first[: -len(".py")] if first.endswith(".py") else ""


def site_packages(python: Path) -> Path:
    """The ``site-packages`` folder of the venv whose interpreter is ``python``."""
    return next(python.parent.parent.glob("lib/python3*/site-packages"))


def python_full_version(venv: Path) -> str:
    """The full version of a venv's Python (``3.11.7``), as its ``pyvenv.cfg`` records it."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in {"version_info", "version"}:
            return ".".join(value.strip().split(".")[:3])
    raise ValueError(f"{venv}/pyvenv.cfg names no Python version")


def installed(folder: Path) -> dict[str, Distribution]:
    """Every distribution in ``folder`` (a ``site-packages``), by canonical name."""
    found = {}
    for info in sorted(folder.glob("*.dist-info")):
        metadata = info / "METADATA"
        if not metadata.is_file():
            continue
        headers = HeaderParser().parsestr(metadata.read_text(errors="replace"))
        name = canonicalize_name(headers.get("Name", ""))
        requires = []
        for text in headers.get_all("Requires-Dist") or []:
            try:
                requires.append(Requirement(text))
            except InvalidRequirement:
                continue
        record = info / "RECORD"
        files = [line.split(",", 1)[0] for line in record.read_text().splitlines()] if record.is_file() else []
        top = info / "top_level.txt"
        listed = top.read_text().splitlines() if top.is_file() else []
        top_level = tuple(line.strip() for line in listed if line.strip())
        direct = info / "direct_url.json"
        url = json.loads(direct.read_text()).get("url", "") if direct.is_file() else ""
        found[name] = Distribution(name, headers.get("Version", ""), tuple(requires), tuple(files), top_level, url)
    return found


def owners(folder: Path, distributions: dict[str, Distribution]) -> dict[Path, str]:
    """Which distribution installed each file of ``folder`` (a ``site-packages``), by resolved path."""
    owned = {}
    for distribution in distributions.values():
        for file in distribution.files:
            owned[(folder / file).resolve()] = distribution.name
    return owned


def applies(requirement: Requirement, python_version: str, extras: set[str]) -> bool:
    """Whether a dependency applies on the target's Python, with the ``extras`` asked for (``""``: none)."""
    if requirement.marker is None:
        return True
    environment = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras)
