"""The builds of megatron-core a package index holds, with their upload dates, in the order Megatron's history made
them: what a bisect searches and what ``candidate -- latest`` picks from.

An index is read through its JSON simple API (PEP 691, with the upload times of PEP 700), or, for a folder of files
(``--find-links`` style, and the fake indexes of the tests), from the files' names and modification times.

Version order is not history. Patch releases (0.15.3) are cut from release branches, while the nightly builds
(``0.16.0rc0.dev132713``) are builds of main; and the nightlies' dev numbers are not in the order they were built
either: on the index, builds with neighbouring dev numbers were uploaded weeks apart, and two builds uploaded a day
apart differ by a few lines where builds a month apart differ by thousands. Main's builds are therefore ordered by
their first upload, and patch releases are left out of the line between two ends.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.targets.matrix import MEGATRON_DISTRIBUTION
from harness.targets.venv_install import pip_settings

DEFAULT_INDEX = "https://pypi.org/simple"
_TIMEOUT_S = 120
_EPOCH = datetime.min.replace(tzinfo=UTC)
"""Where a build with no upload time sorts: first."""
_SDIST = re.compile(r"^megatron[-_]core-(?P<version>.+?)\.(?:tar\.gz|zip)$", re.I)


class BuildIndexError(RuntimeError):
    """The index could not be read, or holds nothing the request names; the message says which and where."""


@dataclass(frozen=True)
class BuildFile:
    """One file of a build: a wheel or a source distribution, where to fetch it, and what Python it admits."""

    filename: str
    url: str
    requires_python: str | None = None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class Build:
    """One version of megatron-core on the index: its files and when the first of them was uploaded."""

    version: str
    uploaded: datetime | None
    files: tuple[BuildFile, ...]

    @property
    def parsed(self) -> Version:
        return Version(self.version)

    @property
    def is_nightly(self) -> bool:
        """A build of main (``.devN``), not a release or a release candidate."""
        return self.parsed.is_devrelease

    @property
    def is_patch_release(self) -> bool:
        """A release of a release branch (0.15.3): not on main's line."""
        version = self.parsed
        return not version.is_prerelease and len(version.release) > 2 and version.release[2] > 0

    def admits(self, python: str) -> bool:
        """Whether some file of the build installs on Python ``python`` (``"3.11"``) by its Requires-Python."""
        for file in self.files:
            if file.requires_python is None:
                return True
            try:
                if SpecifierSet(file.requires_python).contains(f"{python}.0", prereleases=True):
                    return True
            except InvalidSpecifier:
                return True
        return False

    def date(self) -> str:
        return self.uploaded.strftime("%Y-%m-%d %H:%M UTC") if self.uploaded else "upload date unknown"


def default_index() -> str:
    """Where pip looks first on this machine: its ``index-url``, else PyPI."""
    return (pip_settings().get("index-url") or [DEFAULT_INDEX])[0]


def index_builds(index: str | None = None) -> list[Build]:
    """Every build of megatron-core on ``index`` (a simple-API URL, or a folder of files), in version order."""
    index = index or default_index()
    folder = Path(index.removeprefix("file://"))
    if not index.startswith(("http://", "https://")) and folder.is_dir() and not (folder / "index.html").exists():
        files = _folder_files(folder)
    else:
        files = _simple_api_files(index)
    grouped: dict[str, list[tuple[BuildFile, datetime | None]]] = {}
    for file, uploaded in files:
        version = _version_of(file.filename)
        if version is not None:
            grouped.setdefault(version, []).append((file, uploaded))
    builds = []
    for version, entries in grouped.items():
        dates = [d for _, d in entries if d is not None]
        builds.append(Build(version, min(dates) if dates else None, tuple(f for f, _ in entries)))
    return sorted(builds, key=lambda b: b.parsed)


def _version_of(filename: str) -> str | None:
    if filename.endswith(".whl"):
        try:
            name, version, _, _ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        return str(version) if name == MEGATRON_DISTRIBUTION else None
    found = _SDIST.match(filename)
    if not found:
        return None
    try:
        return str(Version(found.group("version")))
    except InvalidVersion:
        return None


def _folder_files(folder: Path) -> list[tuple[BuildFile, datetime | None]]:
    """A find-links folder: every file's modification time stands for its upload time."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_file():
            uploaded = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
            found.append((BuildFile(path.name, path.resolve().as_uri()), uploaded))
    return found


def _simple_api_files(index: str) -> list[tuple[BuildFile, datetime | None]]:
    url = f"{index.rstrip('/')}/{MEGATRON_DISTRIBUTION}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            page = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise BuildIndexError(f"the index {url} could not be read as a JSON simple API (PEP 691): {err}") from None
    found = []
    for entry in page.get("files", []):
        if entry.get("yanked"):
            continue
        uploaded = entry.get("upload-time")
        when = datetime.fromisoformat(uploaded.replace("Z", "+00:00")) if uploaded else None
        found.append((BuildFile(entry["filename"], entry["url"], entry.get("requires-python")), when))
    return found


def find(builds: list[Build], version: str, index: str) -> Build:
    """The build of ``version``; :class:`BuildIndexError`, naming the nearest versions the index has, when it is not
    there."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        raise BuildIndexError(f"{version!r} is not a version") from None
    for build in builds:
        if build.parsed == wanted:
            return build
    near = sorted(builds, key=lambda b: abs(_rank(b.parsed) - _rank(wanted)))[:3]
    nearest = f" (nearest there: {', '.join(b.version for b in sorted(near, key=lambda b: b.parsed))})" if near else ""
    raise BuildIndexError(f"{MEGATRON_DISTRIBUTION} {version} is not on the index {index}{nearest}")


def _rank(version: Version) -> float:
    major, minor, micro = [*version.release, 0, 0, 0][:3]
    return major * 1e6 + minor * 1e3 + micro


def _before(first: Build, second: Build) -> bool:
    """Whether ``first`` comes before ``second`` in Megatron's history: two nightly builds by their upload, anything
    else by version (a release's upload says nothing: 0.15.3 was uploaded after 0.16's nightlies)."""
    if first.is_nightly and second.is_nightly:
        return (first.uploaded or _EPOCH, first.parsed) < (second.uploaded or _EPOCH, second.parsed)
    return first.parsed < second.parsed


def main_line(builds: list[Build], good: Build, bad: Build) -> tuple[list[Build], list[Build]]:
    """The builds from ``good`` to ``bad`` in history order (both ends included), and the patch releases between them
    left out as not being on main's line."""
    if not _before(good, bad):
        raise BuildIndexError(
            f"good {good.version} is not older than bad {bad.version}: name the older build first "
            "(nightly builds are ordered by their upload, not their dev number)"
        )
    between = [b for b in builds if b not in (good, bad) and _before(good, b) and _before(b, bad)]
    left_out = [b for b in between if b.is_patch_release]
    kept = [b for b in between if not b.is_patch_release]
    kept.sort(key=lambda b: (b.uploaded or _EPOCH, b.parsed))
    return [good, *kept, bad], left_out


def newest_for(builds: list[Build], python: str) -> Build | None:
    """The newest build that installs on Python ``python``: the highest release line, and within it a release
    before a release candidate before main's builds, the latest uploaded of those."""
    admitted = [b for b in builds if b.admits(python)]
    if not admitted:
        return None

    def key(build: Build) -> tuple:
        version = build.parsed
        stage = 0 if version.is_devrelease else (1 if version.is_prerelease else 2)
        return (version.release, stage, version.pre or (), build.uploaded or _EPOCH)

    return max(admitted, key=key)
