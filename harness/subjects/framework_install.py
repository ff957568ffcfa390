"""Installing a framework and its dependencies beside a target's Megatron, the way ``pip install`` would, without
ever replacing the target's torch or megatron-core.

The venv the cases run in starts as an exact copy of the target venv's packages (hard links from uv's cache), then
the framework goes in: a published release (``[subject] distribution``), a folder installed as ``pip install .``
does (its build backend resolves dynamic dependencies: ``setup.py``'s ``install_requires``), and plain requirement
strings. The target's torch and megatron-core are held by uv's ``--override``, so the framework's own pins of them
are overridden, never obeyed; the report says where they disagreed, and a target outside the megatron-core range the
framework declares is "the upgrade being checked". Everything else may move within the matrix's pins for the target
(its numpy range included), and the report lists what moved.

What cannot be installed does not stop the session: a dependency that fails to build here (a CUDA-only build) is left
out, in one line, and the rest installed; ``[subject] leave_out`` leaves named ones out beforehand (overridden by a
marker no interpreter matches). A resolution that fails is reported with uv's explanation, whole, and the framework
is installed without its dependencies, so that its source is there to be read and each family that imports it says
which module is missing.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.formats.file_state import NOT_SOURCE, files_state
from harness.targets.venv_install import install_command

HELD = ("torch", "megatron-core")
"""What the target pins and a framework may never replace."""
RECORD = "megatron-conformance-requirements.json"
"""The file in a requirements venv that says what it was built with and what its install reported."""
NEVER = 'python_version < "0"'
"""A marker no interpreter matches: an override with it removes a dependency from the resolution."""
_MAX_LEFT_OUT = 8
"""Dependencies that fail to build, left out one by one, before the install gives up."""
_FAILED_BUILD = re.compile(r"Failed to (?:build|download and build|download)\s+`([^`]+)`")
_NO_SOLUTION = "No solution found when resolving dependencies"


class RequirementsError(ValueError):
    """Requirements that cannot be installed at all; the message names the key and why."""


@dataclass(frozen=True)
class FrameworkInstall:
    """What goes into a requirements venv: requirement strings (the published framework among them), folders
    installed as ``pip install .`` does, the distributions left out, and the framework's own names (whose
    megatron-core range is "the upgrade being checked" rather than an override)."""

    requirements: tuple[str, ...] = ()
    folders: tuple[Path, ...] = ()
    leave_out: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    """The framework's own requirement strings (``ms-swift[megatron]==4.6.0``, or a folder's project name)."""

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.folders

    def key(self) -> str:
        """What names the venv: the sorted set (folders by path; their content is checked on each use)."""
        parts = sorted({*self.requirements, *(str(f) for f in self.folders)}) + [
            f"-{n}" for n in sorted(self.leave_out)
        ]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:10]


def venv_folder(target_venv: Path, install: FrameworkInstall) -> Path:
    """The requirements venv for ``install`` on the target whose venv is ``target_venv``: beside it."""
    return target_venv.parent / f"{target_venv.name}-with-{install.key()}"


def target_packages(python: Path) -> list[str]:
    """The venv's packages, pinned exactly as installed (``name==version``)."""
    listed = subprocess.run(
        ["uv", "pip", "list", "--format", "json", "--python", str(python)], capture_output=True, text=True, check=True
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


def requirements_python(
    target_python: Path, install: FrameworkInstall, matrix_pins: Sequence[str], python_version: str
) -> tuple[Path, list[str]]:
    """The interpreter of the venv holding the target's packages and ``install``, built where missing or built for
    another set, with what its install reported. ``matrix_pins`` are the target's requirements as the matrix states
    them (``numpy<2``): what may move must stay within them."""
    target_venv = target_python.parent.parent
    pins = target_packages(target_python)
    folder = venv_folder(target_venv, install)
    python = folder / "bin" / "python"
    record = {
        "target": str(target_venv),
        "pins": sorted(pins),
        "requirements": sorted(install.requirements),
        "folders": [str(f) for f in install.folders],
        "leave_out": sorted(install.leave_out),
        "folder_state": [files_state(f) for f in install.folders],
    }
    recorded = folder / RECORD
    if python.exists() and recorded.is_file():
        before = json.loads(recorded.read_text())
        if {k: before.get(k) for k in record} == record:
            return python, list(before.get("report", []))
    subprocess.run(["uv", "venv", "-q", "--clear", "--python", str(target_python), str(folder)], check=True)
    _uv_install(python, install_command(pins, "uv", python_version))
    report = _install(python, pins, install, matrix_pins, python_version, folder)
    recorded.write_text(json.dumps({**record, "report": report}, indent=1))
    return python, report


def _uv_install(python: Path, arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["uv", "pip", "install", "--python", str(python), *arguments], capture_output=True, text=True)


def _install(
    python: Path,
    pins: list[str],
    install: FrameworkInstall,
    matrix_pins: Sequence[str],
    python_version: str,
    folder: Path,
) -> list[str]:
    """Install ``install`` into the venv of ``python`` (holding ``pins`` already); the report's lines."""
    held = held_versions(pins)
    report: list[str] = []
    left_out = list(install.leave_out)
    report += [f"left out {name}, as [subject] leave_out says" for name in install.leave_out]
    copies = _out_of_tree(install.folders, folder / "megatron-conformance-builds")
    wanted = [*matrix_pins, *install.requirements, *(str(f) for f in copies)]
    while True:
        overrides = folder / "megatron-conformance-overrides.txt"
        overrides.write_text(
            "".join(f"{name}=={version}\n" for name, version in held.items())
            + "".join(f"{name}; {NEVER}\n" for name in left_out)
        )
        done = _uv_install(python, ["--override", str(overrides), *install_command(wanted, "uv", python_version)])
        if done.returncode == 0:
            break
        failed = _FAILED_BUILD.search(done.stderr)
        if failed and len(left_out) < _MAX_LEFT_OUT:
            what = " ".join(failed.group(1).split())
            name = canonicalize_name(re.split(r"[=<>!~ @]", what, maxsplit=1)[0])
            if name not in left_out and name not in {
                canonicalize_name(Requirement(r).name) for r in wanted if _named(r)
            }:
                left_out.append(name)
                report.append(f"left out {what}: it cannot be built here ({_last_cause(done.stderr)})")
                continue
        if _NO_SOLUTION in done.stderr:
            report.append(_conflict(done.stderr))
            report += _without_dependencies(python, install, copies, python_version)
            break
        raise RequirementsError(
            f"key 'subject.requirements': {', '.join(install.requirements + tuple(map(str, install.folders)))} "
            f"cannot be installed beside the target's packages:\n{_indented(done.stderr)}"
        )
    after = target_packages(python)
    report += moved_packages(pins, after, held)
    report += overridden_pins(_site_packages(python), held, install.frameworks, python_version)
    return report


def _named(requirement: str) -> bool:
    try:
        Requirement(requirement)
    except InvalidRequirement:
        return False
    return True


def _last_cause(stderr: str) -> str:
    """The last line of uv's error that says something: the error a build raised."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.strip().startswith("hint:")]
    errors = [line for line in lines if re.match(r"\w*(Error|Exception)\b", line)]
    return (errors or lines or ["no output"])[-1][:200]


def _conflict(stderr: str) -> str:
    """uv's explanation of a resolution that failed, whole."""
    explanation = stderr[stderr.index(_NO_SOLUTION) :].strip()
    return f"the requirements cannot be resolved beside the target's pins: {explanation}"


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.strip().splitlines())


def _out_of_tree(folders: Iterable[Path], builds: Path) -> list[Path]:
    """Copies of ``folders`` to build from: a build backend writes into the folder it builds (setuptools' ``build/``
    and ``*.egg-info``), and the gate leaves a user's checkout as it found it."""
    shutil.rmtree(builds, ignore_errors=True)
    copies = []
    for index, folder in enumerate(folders):
        copy = builds / f"{index}-{folder.name}"
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(*NOT_SOURCE, "*.egg-info"), symlinks=True)
        copies.append(copy)
    return copies


def _without_dependencies(
    python: Path, install: FrameworkInstall, copies: list[Path], python_version: str
) -> list[str]:
    """Install the framework alone (no dependencies), so that its source is there to be read."""
    own = {canonicalize_name(Requirement(r).name) for r in install.frameworks}
    alone = [r for r in install.requirements if canonicalize_name(Requirement(r).name) in own]
    if not alone and not copies:
        return []
    done = _uv_install(python, ["--no-deps", *install_command([*alone, *map(str, copies)], "uv", python_version)])
    if done.returncode != 0:
        raise RequirementsError(
            f"key 'subject.requirements': {', '.join([*alone, *map(str, install.folders)])} cannot be installed, even "
            f"without its dependencies:\n"
            f"{_indented(done.stderr)}"
        )
    named = [*alone, *map(str, install.folders)]
    return [f"installed {', '.join(named)} without its dependencies: a module it imports may be missing"]


def moved_packages(before: Iterable[str], after: Iterable[str], held: dict[str, str]) -> list[str]:
    """One line per package of the target venv whose version the framework's install changed or removed."""
    versions = dict(pin.partition("==")[::2] for pin in after)
    versions = {canonicalize_name(name): version for name, version in versions.items()}
    moved = []
    for pin in before:
        name, _, version = pin.partition("==")
        now = versions.get(canonicalize_name(name))
        if canonicalize_name(name) not in held and now != version:
            moved.append(f"{canonicalize_name(name)} {version} → {now or 'removed'}")
    return [f"moved for the framework's requirements: {', '.join(moved)}"] if moved else []


def overridden_pins(
    site_packages: Path, held: dict[str, str], frameworks: Iterable[str], python_version: str
) -> list[str]:
    """Where an installed distribution asks for another torch or megatron-core than the target's: the framework's
    own megatron-core range is the upgrade being checked; any other pin is overridden."""
    extras: dict[str, set[str]] = {}
    for text in frameworks:
        requirement = Requirement(text)
        extras.setdefault(canonicalize_name(requirement.name), {""}).update(requirement.extras)
    lines = []
    for metadata in sorted(site_packages.glob("*.dist-info/METADATA")):
        headers = HeaderParser().parsestr(metadata.read_text(errors="replace"))
        name, version = canonicalize_name(headers.get("Name", "")), headers.get("Version", "")
        if name in HELD:
            continue
        for text in headers.get_all("Requires-Dist") or []:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            held_name = canonicalize_name(requirement.name)
            if held_name not in held or not _applies(requirement, python_version, extras.get(name, {""})):
                continue
            if requirement.specifier.contains(held[held_name], prereleases=True):
                continue
            spec = str(requirement.specifier)
            if name in extras and held_name == "megatron-core":
                lines.append(
                    f"megatron-core {held[held_name]} is outside the range `{name}` `{version}` declares (`{spec}`): "
                    "this is the upgrade being checked"
                )
            else:
                lines.append(
                    f"{name} {version} asks for {held_name}{spec}: overridden, the target's {held[held_name]} stays"
                )
    return lines


def _applies(requirement: Requirement, python_version: str, extras: set[str]) -> bool:
    """Whether a dependency applies on the target's Python, with the ``extras`` asked for (``""``: none)."""
    if requirement.marker is None:
        return True
    environment = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras)


def _site_packages(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python3*/site-packages"))
