"""A resolution that reached far back: a dependency installed at a release more than two years older than its newest
release for the target's Python (``tokenizers 0.10.3`` from 2021), said with the requirement that forced it.

Such a release is rarely what the framework's authors run; it often cannot be built here, and a report that does not
say why a dependency is ancient leaves the user guessing which pin to lift. Release dates come from the package
index's JSON API (PEP 691 and PEP 700's ``upload-time``), asked once per added or moved distribution when the venv is
built; an index that gives no dates is said once, never read as "nothing is old".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from harness.install.distributions import Distribution, applies
from harness.targets.venv_install import pip_settings

BEHIND = timedelta(days=730)
"""How far behind the newest release an installed one may be before it is said."""
DEFAULT_INDEX = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json"
_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Release:
    version: Version
    uploaded: datetime


class IndexUnreadable(RuntimeError):
    """The index gave no release dates for a distribution (no JSON API, no ``upload-time``, no answer)."""


def index_url() -> str:
    """The index pip reads first (its ``index-url``), else PyPI's."""
    return (pip_settings().get("index-url") or [DEFAULT_INDEX])[0].rstrip("/")


def releases(name: str, python_full_version: str, index: str) -> dict[Version, Release]:
    """Each release of ``name`` with a file that installs on ``python_full_version``, dated by its first upload;
    none where the index has no such project."""
    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": _ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as answer:
            files = json.loads(answer.read()).get("files", [])
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return {}  # not on this index (a stand-in from a local folder): nothing there to be behind
        raise IndexUnreadable(f"{index}/{name}/: {err}") from err
    except (OSError, ValueError) as err:
        raise IndexUnreadable(f"{index}/{name}/: {err}") from err
    tags = _tags(python_full_version)
    found: dict[Version, Release] = {}
    for entry in files:
        uploaded = entry.get("upload-time")
        if entry.get("yanked") or not uploaded:
            continue
        version = _installs(entry, python_full_version, tags)
        if version is None:
            continue
        when = datetime.fromisoformat(uploaded.replace("Z", "+00:00"))
        if version not in found or when < found[version].uploaded:
            found[version] = Release(version, when)
    if files and not found and not any(entry.get("upload-time") for entry in files):
        raise IndexUnreadable(f"{index}/{name}/ gives no upload-time")
    return found


def _tags(python_full_version: str) -> set[Tag]:
    major_minor = tuple(int(p) for p in python_full_version.split(".")[:2])
    return {*cpython_tags(python_version=major_minor), *compatible_tags(python_version=major_minor)}


def _installs(entry: dict, python_full_version: str, tags: set[Tag]) -> Version | None:
    """The version of an index file that installs on this Python (a fitting wheel, or a source distribution)."""
    requires = entry.get("requires-python")
    try:
        if requires and not SpecifierSet(requires).contains(python_full_version, prereleases=True):
            return None
        filename = entry.get("filename", "")
        if filename.endswith(".whl"):
            _, version, _, file_tags = parse_wheel_filename(filename)
            return version if file_tags & tags else None
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion, ValueError):
        return None


def behind(installed_version: str, found: dict[Version, Release]) -> tuple[Release, Release] | None:
    """The installed release and the newest one, where the installed one is more than :data:`BEHIND` older."""
    try:
        version = Version(installed_version)
    except InvalidVersion:
        return None
    mine = found.get(version) or found.get(Version(version.base_version))
    stable = [r for r in found.values() if not r.version.is_prerelease or version.is_prerelease]
    if mine is None or not stable:
        return None
    newest = max(stable, key=lambda r: r.version)
    return (mine, newest) if newest.uploaded - mine.uploaded > BEHIND else None


def forced_by(
    name: str, newest: Version, distributions: dict[str, Distribution], requirements: Iterable[str], python_version: str
) -> list[str]:
    """What excludes ``newest`` of ``name``: an installed distribution's requirement, or a requirement string the
    install was given (the framework's own, the target's pins)."""
    found = []
    for distribution in distributions.values():
        for requirement in distribution.requires:
            if _excludes(requirement, name, newest) and applies(requirement, python_version, {""}):
                found.append(f"{distribution.name} {distribution.version} (`{requirement}`)")
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if _excludes(requirement, name, newest):
            found.append(f"the install's `{text}`")
    return sorted(set(found))


def _excludes(requirement: Requirement, name: str, version: Version) -> bool:
    return canonicalize_name(requirement.name) == name and not requirement.specifier.contains(version, prereleases=True)


def ancient_releases(
    chosen: dict[str, str],
    distributions: dict[str, Distribution],
    requirements: Iterable[str],
    python_version: str,
    python_full_version: str,
    index: str | None = None,
) -> list[str]:
    """One line per distribution of ``chosen`` (name: the version the resolution took) more than two years behind
    its newest release for this Python, naming what forced it; one line for the distributions whose dates the index
    did not give."""
    where = index or index_url()
    names = sorted(chosen)
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda n: _dated(n, python_full_version, where), names))
    lines, unread = [], []
    wanted = list(requirements)
    for name, answer in zip(names, answers, strict=True):
        if isinstance(answer, IndexUnreadable):
            unread.append(name)
            continue
        old = behind(chosen[name], answer)
        if old is None:
            continue
        mine, newest = old
        why = forced_by(name, newest.version, distributions, wanted, python_version)
        cause = (
            f"forced by {', '.join(why)}"
            if why
            else f"no requirement here excludes {newest.version}: the resolution chose it for another package's range"
        )
        years = (newest.uploaded - mine.uploaded).days / 365.25
        lines.append(
            f"{name} {chosen[name]} ({mine.uploaded:%Y-%m-%d}) is {years:.1f} years behind {name} {newest.version} "
            f"({newest.uploaded:%Y-%m-%d}), the newest for Python {python_version}: {cause}"
        )
    if unread:
        named = ", ".join(unread[:5]) + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")
        lines.append(f"the release dates of {named} could not be read from {where}: their age is not checked")
    return lines


def _dated(name: str, python_full_version: str, index: str) -> dict[Version, Release] | IndexUnreadable:
    try:
        return releases(name, python_full_version, index)
    except IndexUnreadable as err:
        return err
