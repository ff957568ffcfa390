"""Dependencies that require torch or megatron-core resolved to a release that accepts the target's, rather than
installed with their pin overridden.

The target's torch and megatron-core go into the resolution as overrides, so that the framework's own pins of them
never win. An override replaces *every* requirement on them, though: a dependency built for one torch
(``torchvision 0.29.1`` asks for ``torch==2.14.0``) is then installed beside another, and fails at import
(``operator torchvision::nms does not exist``). So after the resolution, each dependency whose requirement excludes a
held version is resolved once more on its own, with the held versions as plain requirements, and the newest release
that accepts them becomes a constraint of a second install. Only the framework's own distributions keep their pins
overridden. Where no release accepts the target's, the dependency is kept as it is, and the import probe
(:mod:`harness.install.import_probe`) decides whether it can stay.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.install.distributions import installed, site_packages
from harness.install.pin_report import HELD, framework_extras, held_mismatches
from harness.install.uv_runs import index_arguments, uv


@dataclass(frozen=True)
class CoupledRelease:
    """A dependency that asked for another torch or megatron-core than the target's, and what it becomes."""

    name: str
    version: str
    asks: str
    """Its requirement the target does not meet (``torch==2.14.0``)."""
    accepting: str | None
    """The newest release whose requirements accept the target's, or None where none does."""
    why_none: str = ""


def coupled_releases(
    python: Path, held: dict[str, str], frameworks: tuple[str, ...], matrix_pins: list[str], python_version: str
) -> list[CoupledRelease]:
    """Every dependency in the venv of ``python`` (not the framework's own) whose requirement excludes a held
    version, with the newest release that accepts all held versions within ``matrix_pins``."""
    extras = framework_extras(frameworks)
    found: dict[str, CoupledRelease] = {}
    for mismatch in held_mismatches(installed(site_packages(python)), held, extras, python_version):
        name = mismatch.distribution.name
        if name in extras or name in found:
            continue
        accepting, why = accepting_release(python, name, held, matrix_pins)
        asks = f"{mismatch.held}{mismatch.spec}"
        found[name] = CoupledRelease(name, mismatch.distribution.version, asks, accepting, why)
    return list(found.values())


def accepting_release(python: Path, name: str, held: dict[str, str], matrix_pins: list[str]) -> tuple[str | None, str]:
    """The newest release of ``name`` that resolves beside the held versions and ``matrix_pins`` (``numpy<2``),
    with uv's reason where none does."""
    pins = [p for p in matrix_pins if _name(p) not in HELD]
    pins += [f"{held_name}=={version}" for held_name, version in held.items()]
    folder = python.parent.parent
    constraints = folder / "megatron-conformance-coupled-constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    done = subprocess.run(
        [
            uv(),
            "pip",
            "compile",
            "--python",
            str(python),
            "--no-header",
            "--quiet",
            "--constraint",
            str(constraints),
            *index_arguments(),
            "-",
        ],
        input=f"{name}\n" + "".join(f"{held_name}\n" for held_name in held),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None, _first_cause(done.stderr) or f"uv exited with {done.returncode}"
    pinned = re.search(rf"^{re.escape(name)}==(\S+)", _canonical_lines(done.stdout), re.MULTILINE)
    return (pinned.group(1), "") if pinned else (None, f"uv's resolution lists no {name}")


def _first_cause(stderr: str) -> str:
    """uv's first reason (``all versions of X depend on torch>=2.14``), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        found = re.search(r"Because (.+?)(?:,| and you require)", line)
        if found:
            return found.group(1)
    return lines[-1][:300] if lines else ""


def _name(requirement: str) -> str:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return ""


def _canonical_lines(compiled: str) -> str:
    """uv's compiled pins with canonical names, so that ``Pillow==…`` matches ``pillow``."""
    lines = []
    for line in compiled.splitlines():
        name, sep, version = line.partition("==")
        lines.append(f"{canonicalize_name(name)}=={version}" if sep else line)
    return "\n".join(lines)


def constraint_lines(releases: list[CoupledRelease]) -> list[str]:
    """The pins a second install takes as constraints."""
    return [f"{r.name}=={r.accepting}" for r in releases if r.accepting is not None and r.accepting != r.version]


def report_lines(releases: list[CoupledRelease], held: dict[str, str], taken: bool) -> list[str]:
    """One line per coupled dependency: what it became, or why it stays as it is (``taken``: whether the second
    install with the accepting releases succeeded)."""
    target = ", ".join(f"{name} {version}" for name, version in sorted(held.items()))
    lines = []
    for release in releases:
        if release.accepting is None:
            lines.append(
                f"{release.name} {release.version} asks for {release.asks} and no release of it accepts the "
                f"target's {target} ({release.why_none}): kept as it is"
            )
        elif taken:
            lines.append(
                f"{release.name} {release.version} asks for {release.asks}: took {release.name} {release.accepting}, "
                f"the newest release that accepts the target's {target}"
            )
        else:
            lines.append(
                f"{release.name} {release.version} asks for {release.asks}: {release.name} {release.accepting} accepts "
                f"the target's {target} but not the framework's requirements: kept as it is"
            )
    return lines
