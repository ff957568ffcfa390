"""A framework's own dependencies (``[subject] requirements``), installed beside a target's pins in a venv of their own.

A framework's adapter imports what its package needs (``attrs``, ``ray``, ...), which a target venv holding only
Megatron's pins does not have. Those go into a second venv per target and requirement set: the target venv's exact
packages (its torch build and its megatron-core among them) plus the framework's requirements, installed through
uv's cache, so that a venv is a few seconds of hard links once the wheels are cached. Its folder is named by a hash
of the set, so every run with the same set shares it and a changed set gets a new one; the target venv itself is
never touched. A requirement that would replace the target's torch or megatron-core is refused in one line before
anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.subjects.declaration import Declaration
from harness.targets.venv_install import install_command

HELD = ("torch", "megatron-core")
"""What the target pins and a framework's requirements may never replace."""
RECORD = "megatron-conformance-requirements.json"
"""The file in a requirements venv that says what it was built with; a venv without it is rebuilt."""


class RequirementsError(ValueError):
    """Requirements that cannot be installed; one line naming the key and why."""


def declared_requirements(declaration: Declaration) -> list[str]:
    """The declaration's requirements as pip requirement strings, a path (``"."``) replaced by the dependencies of
    the ``pyproject.toml`` in that folder (relative to the declaration's own folder)."""
    requirements: list[str] = []
    for item in declaration.requirements:
        if item == "." or item.startswith(("./", "../", "/")):
            requirements += _pyproject_dependencies(declaration, declaration.path.parent / item)
        else:
            requirements.append(item)
    for requirement in requirements:
        try:
            Requirement(requirement)
        except InvalidRequirement as err:
            raise declaration.fail("subject.requirements", f"{requirement!r} is not a requirement: {err}") from None
    return requirements


def _pyproject_dependencies(declaration: Declaration, folder: Path) -> list[str]:
    pyproject = folder.resolve() / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise declaration.fail("subject.requirements", f"cannot read {pyproject}: {err}") from None
    dependencies = project.get("dependencies", [])
    if not isinstance(dependencies, list):
        raise declaration.fail("subject.requirements", f"{pyproject}: [project] dependencies is not a list")
    return [str(dependency) for dependency in dependencies]


def refused(requirements: Iterable[str], held: dict[str, str]) -> str | None:
    """Why ``requirements`` cannot go beside the target's ``held`` versions (name -> version), or ``None``: a
    requirement of torch or megatron-core whose specifier excludes the target's own."""
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name in held and not requirement.specifier.contains(held[name], prereleases=True):
            return (
                f"{text!r} would replace the target's {name} {held[name]}: the target's own build stays; "
                f"remove it from [subject] requirements, or run the target whose {name} it takes"
            )
    return None


def venv_folder(target_venv: Path, requirements: Iterable[str]) -> Path:
    """The folder of the venv for ``requirements`` on the target whose venv is ``target_venv``: beside it, named
    by the target and a hash of the sorted set."""
    key = hashlib.sha256("\n".join(sorted(set(requirements))).encode()).hexdigest()[:10]
    return target_venv.parent / f"{target_venv.name}-with-{key}"


def target_packages(target_python: Path) -> list[str]:
    """The target venv's packages, pinned exactly as installed (``name==version``)."""
    listed = subprocess.run(
        ["uv", "pip", "list", "--format", "json", "--python", str(target_python)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [f"{entry['name']}=={entry['version']}" for entry in json.loads(listed.stdout)]


def held_versions(pins: Iterable[str]) -> dict[str, str]:
    """The versions of :data:`HELD` among exact ``pins``."""
    held = {}
    for pin in pins:
        name, _, version = pin.partition("==")
        if canonicalize_name(name) in HELD:
            held[canonicalize_name(name)] = version
    return held


def requirements_python(target_python: Path, requirements: list[str], python_version: str) -> Path:
    """The interpreter of the venv that holds the target's packages and ``requirements``, built where missing or
    built for another set. Raises :class:`RequirementsError` with one line where it cannot be."""
    target_venv = target_python.parent.parent
    pins = target_packages(target_python)
    problem = refused(requirements, held_versions(pins))
    if problem:
        raise RequirementsError(f"key 'subject.requirements': {problem}")
    folder = venv_folder(target_venv, requirements)
    python = folder / "bin" / "python"
    record = {"target": str(target_venv), "pins": sorted(pins), "requirements": sorted(requirements)}
    recorded = folder / RECORD
    if python.exists() and recorded.is_file() and json.loads(recorded.read_text()) == record:
        return python
    subprocess.run(["uv", "venv", "-q", "--clear", "--python", str(target_python), str(folder)], check=True)
    install = install_command([*pins, *requirements], "uv", python_version)
    built = subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(python), *install], capture_output=True, text=True
    )
    if built.returncode != 0:
        last = [line for line in built.stderr.splitlines() if line.strip()][-3:]
        raise RequirementsError(
            f"key 'subject.requirements': {', '.join(requirements)} cannot be installed beside the target's "
            f"packages: {' '.join(line.strip() for line in last)}"
        )
    recorded.write_text(json.dumps(record, indent=1))
    return python
