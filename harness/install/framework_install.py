"""Installing a framework and its dependencies beside a target's Megatron, the way ``pip install`` would, without
ever replacing the target's torch or megatron-core.

The venv the cases run in starts as an exact copy of the target venv's packages (hard links from uv's cache), then
the framework goes in: a published release (``[subject] distribution``), a folder installed as ``pip install .``
does (its build backend resolves dynamic dependencies: ``setup.py``'s ``install_requires``), and plain requirement
strings. The target's torch and megatron-core are held by uv's ``--override``, so the framework's own pins of them
are overridden, never obeyed; the report says where they disagreed, and a target outside the megatron-core range the
framework declares is "the upgrade being checked". Everything else may move within the matrix's pins for the target
(its numpy range included), and the report lists what moved.

A dependency that asks for another torch or megatron-core than the target's is resolved to a release that accepts the
target's (:mod:`.torch_coupled`); then the venv must import Megatron as the target's does, and each dependency that
requires torch must import beside it, or what breaks that is left out (:mod:`.import_probe`). A dependency the
resolution took from more than two years back is said with what forced it (:mod:`.release_age`).

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
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.formats.file_state import NOT_SOURCE, files_state
from harness.install.distributions import installed, python_full_version, site_packages
from harness.install.import_probe import mend
from harness.install.pin_report import held_versions, moved_packages, overridden_pins
from harness.install.release_age import ancient_releases
from harness.install.torch_coupled import constraint_lines, coupled_releases, report_lines
from harness.install.uv_runs import uv, uv_pip
from harness.targets.venv_install import install_command

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
    listed = uv_pip(python, "list", ["--format", "json"])
    if listed.returncode != 0:
        raise RequirementsError(f"uv cannot list the packages of {python}: {listed.stderr.strip()}")
    return [f"{entry['name']}=={entry['version']}" for entry in json.loads(listed.stdout)]


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
        "procedure": procedure_digest(),
    }
    recorded = folder / RECORD
    if python.exists() and recorded.is_file():
        before = json.loads(recorded.read_text())
        if {k: before.get(k) for k in record} == record:
            return python, list(before.get("report", []))
    subprocess.run([uv(), "venv", "-q", "--clear", "--python", str(target_python), str(folder)], check=True)
    uv_pip(python, "install", install_command(pins, "uv", python_version))
    report, megatron_broken = _install(python, target_python, pins, install, matrix_pins, python_version, folder)
    recorded.write_text(json.dumps({**record, "report": report, "megatron_broken": megatron_broken}, indent=1))
    return python, report


def procedure_digest() -> str:
    """A digest of this package's source: a venv built by another version of the install is built again, since what
    it left out, took and reported may differ."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def megatron_broken_by_install(prefix: Path) -> str | None:
    """Why the requirements venv at ``prefix`` cannot import the Megatron its target's venv imports, where its
    install broke that and nothing left out mended it; None otherwise (or where ``prefix`` is no such venv)."""
    recorded = prefix / RECORD
    if not recorded.is_file():
        return None
    return json.loads(recorded.read_text()).get("megatron_broken")


def _install(
    python: Path,
    target_python: Path,
    pins: list[str],
    install: FrameworkInstall,
    matrix_pins: Sequence[str],
    python_version: str,
    folder: Path,
) -> tuple[list[str], str | None]:
    """Install ``install`` into the venv of ``python`` (holding ``pins`` already): the report's lines, and why the
    venv cannot import Megatron where the install broke that for good."""
    held = held_versions(pins)
    report = [f"left out {name}, as [subject] leave_out says" for name in install.leave_out]
    copies = _out_of_tree(install.folders, folder / "megatron-conformance-builds")
    wanted = [*matrix_pins, *install.requirements, *(str(f) for f in copies)]
    named = ", ".join([*install.requirements, *map(str, install.folders)])
    resolution = _Resolution(python, folder, held, list(install.leave_out), wanted, python_version, named)
    resolved, lines = resolution.run([])
    report += lines
    if not resolved:
        report += _without_dependencies(python, install, copies, python_version)
    else:
        coupled = coupled_releases(python, held, install.frameworks, list(matrix_pins), python_version)
        constraints = constraint_lines(coupled)
        taken = bool(constraints) and resolution.run(constraints, leave_out_builds=False)[0]
        report += report_lines(coupled, held, taken or not constraints)
    own = {canonicalize_name(Requirement(r).name) for r in install.frameworks if _named(r)}
    own |= {d.name for d in installed(site_packages(python)).values() if _from(d.direct_url, copies)}
    mending = mend(python, target_python, pins, own, held, python_version)
    report += mending.lines
    distributions = installed(site_packages(python))
    report += moved_packages(pins, [f"{d.name}=={d.version}" for d in distributions.values()], held)
    report += overridden_pins(distributions, held, install.frameworks, python_version)
    before = dict(pin.partition("==")[::2] for pin in pins)
    chosen = {**resolution.failed_builds}
    chosen.update({n: d.version for n, d in distributions.items() if before.get(n) != d.version and n not in held})
    report += ancient_releases(chosen, distributions, wanted, python_version, python_full_version(python.parent.parent))
    return report, mending.megatron_broken


class _Resolution:
    """uv's install of the wanted requirements with the held versions overridden, leaving out one by one what fails
    to build here, and taking extra constraints (releases that accept the target's torch) where given."""

    def __init__(
        self,
        python: Path,
        folder: Path,
        held: dict[str, str],
        left_out: list[str],
        wanted: list[str],
        python_version: str,
        named: str,
    ) -> None:
        self.python, self.folder, self.held, self.left_out = python, folder, held, left_out
        self.wanted, self.python_version, self.named = wanted, python_version, named
        self.failed_builds: dict[str, str] = {}
        """Releases the resolution chose that could not be built (name: version), for their age."""

    def run(self, constraints: list[str], leave_out_builds: bool = True) -> tuple[bool, list[str]]:
        """Whether the requirements resolved, and the report's lines (what was left out, uv's explanation)."""
        lines: list[str] = []
        constrained = self.folder / "megatron-conformance-constraints.txt"
        constrained.write_text("".join(f"{line}\n" for line in constraints))
        while True:
            overrides = self.folder / "megatron-conformance-overrides.txt"
            overrides.write_text(
                "".join(f"{name}=={version}\n" for name, version in self.held.items())
                + "".join(f"{name}; {NEVER}\n" for name in self.left_out)
            )
            arguments = ["--override", str(overrides), "--constraint", str(constrained)]
            done = uv_pip(
                self.python, "install", [*arguments, *install_command(self.wanted, "uv", self.python_version)]
            )
            if done.returncode == 0:
                return True, lines
            failed = _FAILED_BUILD.search(done.stderr)
            if failed and leave_out_builds and len(self.left_out) < _MAX_LEFT_OUT:
                what = " ".join(failed.group(1).split())
                name = canonicalize_name(re.split(r"[=<>!~ @]", what, maxsplit=1)[0])
                folders = [Path(r).resolve().as_uri() for r in self.wanted if not _named(r)]
                asked = {canonicalize_name(Requirement(r).name) for r in self.wanted if _named(r)}
                # What was asked for by name, or the framework's own folder, is never left out: its build failing
                # is the install failing, said whole.
                if name not in self.left_out and name not in asked and not any(url in what for url in folders):
                    self.left_out.append(name)
                    if "==" in what:
                        self.failed_builds[name] = what.partition("==")[2]
                    lines.append(f"left out {what}: it cannot be built here ({_last_cause(done.stderr)})")
                    continue
            if not leave_out_builds:
                return False, lines
            if _NO_SOLUTION in done.stderr:
                return False, [*lines, _conflict(done.stderr)]
            raise RequirementsError(
                f"key 'subject.requirements': {self.named} cannot be installed beside the target's "
                f"packages:\n{_indented(done.stderr)}"
            )


def _from(url: str, folders: list[Path]) -> bool:
    """Whether a distribution's PEP 610 ``url`` is one of the framework's folders (a folder install names no project
    in ``pyproject.toml`` where only ``setup.py`` builds it)."""
    return any(url == folder.resolve().as_uri() for folder in folders)


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
    done = uv_pip(python, "install", ["--no-deps", *install_command([*alone, *map(str, copies)], "uv", python_version)])
    if done.returncode != 0:
        raise RequirementsError(
            f"key 'subject.requirements': {', '.join([*alone, *map(str, install.folders)])} cannot be installed, even "
            f"without its dependencies:\n"
            f"{_indented(done.stderr)}"
        )
    named = [*alone, *map(str, install.folders)]
    return [f"installed {', '.join(named)} without its dependencies: a module it imports may be missing"]
