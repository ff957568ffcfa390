"""A candidate Megatron, named on the command line, turned into a one-target matrix the gate runs like any other.

A user about to adopt a release should not have to edit ``matrix.yaml`` first: ``nox -s candidate -- <spec>`` takes
a pip requirement (``megatron-core==0.19.2``), a wheel file, a source tree or a git URL. What a matrix entry records
by hand is read from the candidate itself: the Python it runs on from its ``Requires-Python``, the provider's call
shapes and process-group keyword from the installed package (see :mod:`harness.targets.provider_shapes`); the torch
pin and anything Megatron cannot tell are taken from the newest matrix target. A spec the gate cannot use ends in one
line naming the spec and the reason, before any venv is built.
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.targets.interpreters import find_interpreter, running_version
from harness.targets.matrix import MEGATRON_DISTRIBUTION, Target

SESSION = "megatron-candidate"
_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
"""Interpreter versions a candidate may run on, lowest first: the lowest one its Requires-Python admits is taken,
unless the running interpreter qualifies."""
_DOWNLOAD_TIMEOUT_S = 600


class CandidateError(ValueError):
    """A spec the gate cannot run: the message names the spec and the reason."""


@dataclass(frozen=True)
class Candidate:
    """What the command line named, where it lies now, and what its metadata says."""

    spec: str
    kind: str
    location: str
    version: str | None
    requires_python: SpecifierSet | None


def classify(spec: str) -> tuple[str, str]:
    """The matrix source kind (``pypi``, ``wheel``, ``tree``, ``git``) and location ``spec`` names."""
    if spec.startswith("git+"):
        if not spec.startswith("git+https://"):
            raise CandidateError(f"candidate {spec}: a git URL must start with git+https://")
        return "git", spec
    path = Path(spec).expanduser()
    if spec.endswith(".whl"):
        if not path.is_file():
            raise CandidateError(f"candidate {spec}: no such wheel file")
        return "wheel", str(path.resolve())
    if path.is_dir():
        if not (path / "megatron" / "core").is_dir():
            raise CandidateError(f"candidate {spec}: the directory holds no megatron/core package: not a Megatron tree")
        return "tree", str(path.resolve())
    try:
        requirement = Requirement(spec)
    except InvalidRequirement:
        raise CandidateError(
            f"candidate {spec}: neither a pip requirement, a .whl file, a source tree nor a git+https:// URL"
        ) from None
    if canonicalize_name(requirement.name) != MEGATRON_DISTRIBUTION:
        raise CandidateError(f"candidate {spec}: names {requirement.name}, not {MEGATRON_DISTRIBUTION}")
    if not requirement.specifier:
        raise CandidateError(f"candidate {spec}: pin a version, e.g. {MEGATRON_DISTRIBUTION}==0.19.2")
    return "pypi", spec


def wheel_metadata(wheel: Path, spec: str) -> tuple[str, SpecifierSet | None]:
    """Version and Requires-Python of a megatron-core wheel; any other wheel is refused."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                raise CandidateError(f"candidate {spec}: {wheel.name} has no .dist-info/METADATA: not a wheel")
            metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    except zipfile.BadZipFile:
        raise CandidateError(f"candidate {spec}: {wheel.name} is not a zip archive: not a wheel") from None
    if canonicalize_name(metadata.get("Name", "")) != MEGATRON_DISTRIBUTION:
        raise CandidateError(
            f"candidate {spec}: the wheel is {metadata.get('Name')!r}, not a {MEGATRON_DISTRIBUTION} wheel"
        )
    return str(metadata["Version"]), _specifier(metadata.get("Requires-Python"), spec)


def _download_wheel(spec: str, directory: Path) -> Path:
    """The wheel the package index has for ``spec``, fetched with pip (which reads this machine's index settings).

    Requires-Python is ignored on purpose: the wheel is only read for its metadata, and a release for a newer Python
    must still be found from an older one.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.whl"):
        old.unlink()
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python"]
    command += ["--only-binary=:all:", "--dest", str(directory), spec]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=_DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CandidateError(f"candidate {spec}: the package index did not answer in {_DOWNLOAD_TIMEOUT_S} s") from None
    if completed.returncode != 0:
        raise CandidateError(f"candidate {spec}: {_pip_reason(completed.stderr, spec)}")
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != 1:
        raise CandidateError(f"candidate {spec}: pip download left {len(wheels)} wheels, expected one")
    return wheels[0]


def _pip_reason(stderr: str, spec: str) -> str:
    """pip's refusal in words: the releases the index has when the version does not exist."""
    if "No module named pip" in stderr:
        return f"pip is not installed in {sys.executable}, which reads the candidate's metadata"
    listed = re.search(r"\(from versions: ([^)]*)\)", stderr)
    if listed is not None:
        versions = []
        for text in listed.group(1).split(","):
            try:
                versions.append(Version(text.strip()))
            except InvalidVersion:
                continue
        released = [v for v in versions if not v.is_prerelease and not v.is_devrelease]
        newest = f" (newest release: {max(released)})" if released else ""
        return f"no release of {MEGATRON_DISTRIBUTION} on the package index matches it{newest}"
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")]
    return errors[-1] if errors else (stderr.strip().splitlines() or ["pip download failed"])[-1]


def tree_metadata(tree: Path, spec: str) -> tuple[str | None, SpecifierSet | None]:
    """Version (from ``megatron/core/package_info.py``) and requires-python (from ``pyproject.toml``) of a tree."""
    version = None
    info = tree / "megatron" / "core" / "package_info.py"
    if info.is_file():
        parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*['\"]?([\w.]*)['\"]?", info.read_text(), re.M))
        if {"MAJOR", "MINOR", "PATCH"} <= set(parts):
            version = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"
    requires = None
    pyproject = tree / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r"^requires-python\s*=\s*['\"]([^'\"]+)['\"]", pyproject.read_text(), re.M)
        requires = found.group(1) if found else None
    return version, _specifier(requires, spec)


def _clone(url: str, directory: Path) -> Path:
    """A shallow checkout of a ``git+https://host/repo.git@ref`` URL."""
    if shutil.which("git") is None:
        raise CandidateError(f"candidate {url}: git is not installed")
    address = url.removeprefix("git+").partition("#")[0]
    repository, at, ref = address.rpartition("@")
    if not at or "/" not in repository.removeprefix("https://"):
        repository, ref = address, ""
    if directory.exists():
        shutil.rmtree(directory)
    command = [
        "git",
        "clone",
        "--quiet",
        "--depth",
        "1",
        *(["--branch", ref] if ref else []),
        repository,
        str(directory),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=_DOWNLOAD_TIMEOUT_S, check=False)
    if completed.returncode != 0:
        reason = (completed.stderr.strip().splitlines() or ["git clone failed"])[-1]
        raise CandidateError(f"candidate {url}: could not clone it: {reason}")
    return directory


def resolve(spec: str, workdir: Path) -> Candidate:
    """Read what the gate needs to know of ``spec`` before a venv exists."""
    kind, location = classify(spec)
    if kind in ("pypi", "wheel"):
        wheel = _download_wheel(spec, workdir / "metadata") if kind == "pypi" else Path(location)
        version, requires = wheel_metadata(wheel, spec)
        return Candidate(spec, kind, location, version, requires)
    tree = Path(location) if kind == "tree" else _clone(location, workdir / "checkout")
    if not (tree / "megatron" / "core").is_dir():
        raise CandidateError(f"candidate {spec}: the checkout holds no megatron/core package: not a Megatron tree")
    version, requires = tree_metadata(tree, spec)
    return Candidate(spec, kind, location, version, requires)


def pick_python(candidate: Candidate) -> str:
    """The interpreter version the candidate runs on: the running one if it qualifies, else the lowest installed one
    its Requires-Python admits."""
    requires = candidate.requires_python
    if requires is None or requires.contains(running_version() + ".0", prereleases=True):
        return running_version()
    admitted = [v for v in _PYTHONS if requires.contains(f"{v}.0", prereleases=True) or requires.contains(f"{v}.99")]
    for version in admitted:
        if find_interpreter(version) is not None:
            return version
    raise CandidateError(
        f"candidate {candidate.spec}: it requires Python {requires} and no such interpreter was found on PATH, under "
        f"pyenv, asdf or mise, or among uv's ({', '.join(admitted) or 'none admitted'}): install one, e.g. "
        f"`pyenv install {admitted[0] if admitted else '3.12'}`"
    )


def matrix_entry(
    candidate: Candidate, python: str, baseline: Target, expected_failures: Path, shapes: Target | None = None
) -> dict[str, Any]:
    """The candidate's matrix entry; pins Megatron does not tell are the newest matrix target's (``baseline``), the
    provider's call shapes (until read from the installed candidate) those of ``shapes`` (default ``baseline``)."""
    shapes = shapes or baseline
    megatron: dict[str, str] = {candidate.kind: candidate.location}
    if candidate.kind != "pypi" and candidate.version:
        megatron["version"] = f"=={candidate.version}"
    return {
        "session": SESSION,
        "description": f"candidate {candidate.spec}",
        "megatron": megatron,
        "python": python,
        "torch": str(baseline.torch),
        "numpy": str(baseline.numpy) if baseline.numpy else None,
        "extra_packages": list(baseline.extra_packages),
        "expected_failures": str(expected_failures),
        "provider": {
            "process_group_keyword": shapes.provider.process_group_keyword,
            "calls": {shape: list(keywords) for shape, keywords in shapes.provider.calls.items()},
        },
    }


def write_matrix(entry: dict[str, Any], path: Path) -> Path:
    """A matrix file holding the candidate alone, with an empty expected-failures file beside it if none exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    expected = Path(entry["expected_failures"])
    if not expected.exists():
        expected.write_text("# Expected failures of the candidate: test-id prefixes, one per line.\n")
    path.write_text(yaml.safe_dump({"targets": [entry]}, sort_keys=False))
    return path


def with_derived_contract(
    entry: dict[str, Any], derived: dict[str, Any], shapes_from: str = "the newest target"
) -> tuple[dict[str, Any], list[str]]:
    """``entry`` with the provider contract read from the installed candidate, and what was taken from where.

    ``derived`` is what ``python -m harness.targets.provider_shapes`` printed in the candidate's venv.
    """
    provider = dict(entry["provider"])
    notes = []
    provider["process_group_keyword"] = derived["process_group_keyword"]
    notes.append(f"process-group keyword read from the installed GPTModel: {derived['process_group_keyword']!r}")
    if derived.get("calls"):
        provider["calls"] = derived["calls"]
        notes.append(f"provider call shapes read from {derived['file']}: {derived['calls']}")
    else:
        notes.append(
            "the candidate ships no megatron/training: provider call shapes taken from the nearest matrix release at "
            f"or below it ({shapes_from})"
        )
    return {**entry, "provider": provider}, notes


def derived_contract(python: Path, root: Path) -> tuple[dict[str, Any] | None, str]:
    """The provider contract the Megatron installed beside ``python`` declares itself (``python -m
    harness.targets.provider_shapes``, run from the checkout ``root``), or ``None`` and why it could not be read (a
    Megatron that does not import): the gate then runs on the matrix's contract and says, family by family, what
    keeps it from checking."""
    completed = subprocess.run(
        [str(python), "-m", "harness.targets.provider_shapes"], cwd=root, capture_output=True, text=True
    )
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, f"the provider contract of the installed Megatron could not be read: {last}"
    return json.loads(completed.stdout.strip().splitlines()[-1]), ""


def baseline_for(candidate_version: str | None, targets: tuple[Target, ...]) -> Target:
    """The matrix target to diff the candidate against: the newest whose pinned version differs from it."""

    others = [t for t in targets if candidate_version is None or t.pinned_version() != candidate_version]
    return (others or list(targets))[-1]


def release_at_or_below(candidate_version: str | None, targets: tuple[Target, ...]) -> Target:
    """The matrix target whose pinned release is the newest at or below ``candidate_version`` (a nightly build of
    main, ``0.16.0rc0.dev100085``, gets 0.15's): what a candidate without ``megatron/training`` takes its provider
    call shapes from. The newest target where the version is unknown or older than every target."""
    pinned = [(Version(t.pinned_version() or ""), t) for t in targets if t.pinned_version()]
    try:
        version = Version(candidate_version) if candidate_version else None
    except InvalidVersion:
        version = None
    below = [(v, t) for v, t in pinned if version is not None and v <= version]
    return max(below, key=lambda pair: pair[0])[1] if below else targets[-1]


def _specifier(value: str | None, spec: str) -> SpecifierSet | None:
    if not value:
        return None
    try:
        return SpecifierSet(value)
    except InvalidSpecifier:
        raise CandidateError(f"candidate {spec}: its Requires-Python {value!r} is not a version specifier") from None
