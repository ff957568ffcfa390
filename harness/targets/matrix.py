"""The target matrix: reading and validating ``matrix.yaml``.

The matrix is the only place a target is described; the noxfile, the pytest plugin and the report all read it
through this module, so a malformed entry is rejected once, with one message naming the target and the key,
instead of surfacing later as a confusing install or collection error.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.formats.keys import key_problem

MEGATRON_DISTRIBUTION = "megatron-core"
_SESSION_NAME = re.compile(r"^megatron-[A-Za-z0-9][A-Za-z0-9._-]*$")
_PYTHON_VERSION = re.compile(r"^3\.\d+$")
_SOURCE_KINDS = ("pypi", "wheel", "tree", "git")

_REQUIRED_KEYS = ("session", "megatron", "python", "torch", "expected_failures", "provider")
_OPTIONAL_KEYS = ("description", "numpy", "extra_packages")
_PROVIDER_KEYS = ("process_group_keyword", "calls")
ALWAYS_PASSED = ("pre_process", "post_process")


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message names the file, the target and the key."""


@dataclass(frozen=True)
class MegatronSource:
    """Where a target's Megatron comes from: a PyPI requirement, a local wheel or tree, or a git URL."""

    kind: str
    location: str
    version: SpecifierSet | None

    def requirement(self) -> str:
        """The argument handed to the installer for this source."""
        if self.kind == "git":
            return f"{MEGATRON_DISTRIBUTION} @ {self.location}"
        return self.location


@dataclass(frozen=True)
class ProviderContract:
    """How this target's training loop calls a model provider, and how its GPTModel takes process groups."""

    process_group_keyword: str | None
    calls: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Target:
    """One Megatron install the gate runs against."""

    session: str
    description: str
    megatron: MegatronSource
    python: str
    torch: SpecifierSet
    numpy: SpecifierSet | None
    extra_packages: tuple[str, ...]
    expected_failures: Path
    provider: ProviderContract
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def __repr__(self) -> str:
        return f"Target({self.session!r})"

    def pinned_version(self) -> str | None:
        """The one megatron-core version the target pins (``==0.19.2``), ``None`` where it pins none."""
        specifiers = list(self.megatron.version or [])
        return specifiers[0].version if len(specifiers) == 1 and specifiers[0].operator == "==" else None

    def requirements(self) -> list[str]:
        """Everything pinned by the target, in install order (Megatron first, pins after)."""
        reqs = [self.megatron.requirement(), f"torch{self.torch}"]
        if self.numpy is not None:
            reqs.append(f"numpy{self.numpy}")
        reqs.extend(self.extra_packages)
        return reqs


@dataclass(frozen=True)
class Matrix:
    """All targets of one matrix file, in file order."""

    path: Path
    targets: tuple[Target, ...]

    def target(self, session: str) -> Target:
        """The target whose session is ``session``; a clear error listing the known ones otherwise."""
        for target in self.targets:
            if target.session == session:
                return target
        known = ", ".join(t.session for t in self.targets)
        raise MatrixError(f"{self.path}: no target named {session!r} (known: {known})")


def venv_python(envdir: Path, session: str) -> Path:
    """The interpreter of a target's nox venv under nox's ``envdir`` (``.nox/`` of a checkout):
    ``.nox/megatron-0-15/bin/python`` for ``megatron-0.15``. nox's own naming: the session name with every character
    but letters, digits, ``_`` and ``-`` made a dash, lower case; and where the interpreter's path would pass about
    100 characters (a checkout deep in a framework's tree), the first 8 hex digits of that name's SHA-1 instead."""
    name = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "-", session).strip().lower()).strip("-")
    if len(os.path.join(str(envdir), name)) > 100 - len("bin/pythonX.Y") and len(str(envdir)) < 100 - 9:
        name = hashlib.sha1(name.encode("ascii")).hexdigest()[:8]
    return envdir / name / "bin" / "python"


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a matrix file; raise :class:`MatrixError` on the first problem found."""
    path = Path(path).resolve()
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise MatrixError(f"{path}: matrix file not found") from None
    except yaml.YAMLError as err:
        raise MatrixError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(document, dict):
        raise MatrixError(f"{path}: the file must be a mapping with one key, 'targets'")
    problem = key_problem(document, ("targets",))
    if problem:
        raise MatrixError(f"{path}: key {problem[0]!r}: {problem[1]}")
    entries = document["targets"]
    if not isinstance(entries, list) or not entries:
        raise MatrixError(f"{path}: key 'targets' must be a non-empty list")
    targets: list[Target] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        target = _parse_target(path, index, entry)
        if target.session in seen:
            raise MatrixError(f"{path}: target {target.session!r}: key 'session': duplicate session name")
        seen.add(target.session)
        targets.append(target)
    return Matrix(path=path, targets=tuple(targets))


def _parse_target(path: Path, index: int, entry: Any) -> Target:
    if not isinstance(entry, dict):
        raise MatrixError(f"{path}: target #{index + 1}: must be a mapping")
    name = entry.get("session")
    label = repr(name) if isinstance(name, str) else f"#{index + 1}"

    def fail(key: str, problem: str) -> MatrixError:
        return MatrixError(f"{path}: target {label}: key {key!r}: {problem}")

    problem = key_problem(entry, _REQUIRED_KEYS, _OPTIONAL_KEYS)
    if problem:
        raise fail(*problem)
    if not isinstance(name, str) or not _SESSION_NAME.match(name):
        raise fail("session", f"{name!r} is not a session name of the form megatron-<short>")
    python = str(entry["python"])
    if not _PYTHON_VERSION.match(python):
        raise fail("python", f"{python!r} is not a Python version like '3.11'")
    torch = _specifier(entry["torch"], fail, "torch", optional=False)
    numpy = _specifier(entry.get("numpy"), fail, "numpy", optional=True)
    extras = entry.get("extra_packages") or []
    if not isinstance(extras, list):
        raise fail("extra_packages", "must be a list of requirement strings")
    for extra in extras:
        try:
            Requirement(str(extra))
        except InvalidRequirement as err:
            raise fail("extra_packages", f"{extra!r} is not a valid requirement: {err}") from None
    expected = (path.parent / str(entry["expected_failures"])).resolve()
    if not expected.is_file():
        raise fail("expected_failures", f"file {expected} does not exist")
    return Target(
        session=name,
        description=str(entry.get("description") or name),
        megatron=_parse_source(path.parent, entry["megatron"], fail),
        python=python,
        torch=torch,
        numpy=numpy,
        extra_packages=tuple(str(e) for e in extras),
        expected_failures=expected,
        provider=_parse_provider(entry["provider"], fail),
        raw=dict(entry),
    )


def _specifier(value: Any, fail: Any, key: str, *, optional: bool) -> SpecifierSet | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise fail(key, f"{value!r} is not a version specifier like '==2.13.0'")
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise fail(key, f"{value!r} is not a valid version specifier") from None
    if not len(spec):
        raise fail(key, f"{value!r} is an empty version specifier")
    return spec


def _parse_source(base: Path, value: Any, fail: Any) -> MegatronSource:
    if not isinstance(value, dict):
        raise fail("megatron", f"must be a mapping with one of {', '.join(_SOURCE_KINDS)}")
    problem = key_problem(value, (), (*_SOURCE_KINDS, "version"))
    if problem:
        raise fail(f"megatron.{problem[0]}", problem[1])
    kinds = [k for k in _SOURCE_KINDS if k in value]
    if len(kinds) != 1:
        raise fail("megatron", f"needs exactly one of {', '.join(_SOURCE_KINDS)}, found {kinds or 'none'}")
    kind = kinds[0]
    location = value[kind]
    if not isinstance(location, str) or not location:
        raise fail(f"megatron.{kind}", "must be a non-empty string")
    version = _specifier(value.get("version"), fail, "megatron.version", optional=True)
    if kind == "pypi":
        try:
            req = Requirement(location)
        except InvalidRequirement as err:
            raise fail("megatron.pypi", f"{location!r} is not a valid requirement: {err}") from None
        if req.name.replace("_", "-").lower() != MEGATRON_DISTRIBUTION:
            raise fail("megatron.pypi", f"{location!r} does not name {MEGATRON_DISTRIBUTION}")
        if not req.specifier:
            raise fail("megatron.pypi", f"{location!r} has no version specifier: pin the version")
        if version is not None:
            raise fail("megatron.version", "only for wheel, tree and git sources; pypi carries its pin")
        return MegatronSource(kind, location, req.specifier)
    if kind == "git":
        if not location.startswith("git+https://"):
            raise fail("megatron.git", f"{location!r} must start with git+https://")
        return MegatronSource(kind, location, version)
    resolved = (base / location).resolve()
    if kind == "wheel" and not (resolved.is_file() and resolved.suffix == ".whl"):
        raise fail("megatron.wheel", f"{resolved} is not a wheel file")
    if kind == "tree" and not (resolved / "megatron").is_dir():
        raise fail("megatron.tree", f"{resolved} is not a source tree holding a 'megatron' package")
    return MegatronSource(kind, str(resolved), version)


def _parse_provider(value: Any, fail: Any) -> ProviderContract:
    if not isinstance(value, dict):
        raise fail("provider", "must be a mapping with process_group_keyword and calls")
    problem = key_problem(value, _PROVIDER_KEYS)
    if problem:
        raise fail(f"provider.{problem[0]}", problem[1])
    pg_keyword = value["process_group_keyword"]
    if pg_keyword is not None and not (isinstance(pg_keyword, str) and pg_keyword.isidentifier()):
        raise fail("provider.process_group_keyword", f"{pg_keyword!r} is not a keyword name or null")
    calls = value["calls"]
    if not isinstance(calls, dict) or "plain" not in calls:
        raise fail("provider.calls", "must be a mapping of call shapes including 'plain'")
    parsed: dict[str, tuple[str, ...]] = {}
    for shape, keywords in calls.items():
        key = f"provider.calls.{shape}"
        if not isinstance(keywords, list) or not all(isinstance(k, str) and k.isidentifier() for k in keywords):
            raise fail(key, "must be a list of keyword names")
        if len(set(keywords)) != len(keywords):
            raise fail(key, "lists a keyword twice")
        missing = [k for k in ALWAYS_PASSED if k not in keywords]
        if missing:
            raise fail(key, f"every call shape passes pre_process and post_process; missing {missing}")
        parsed[str(shape)] = tuple(keywords)
    return ProviderContract(process_group_keyword=pg_keyword, calls=parsed)
